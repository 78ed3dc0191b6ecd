"""`make scale`'s report: every scale measure against the node (host, group) count, in one file (#31).

It reads the result files the scale benches wrote (bench/results, or --results)
and writes `build/scale/report.json` with:

- `nodes`: per node count, `nodes`, `slurmctld_rpc_per_s` (lamplighter's, from
  sdiag's per-user section: root's less Slurm's own daemons'),
  `etcd_req_per_host_s` (each bare-metal host at steady state, at that host
  count), `head_cycle_s` (the head daemon's cycle, median of the window's
  samples), `detect_to_action_s` (a trainer killed, a trainer hung, a GPU fault
  and a node crash to lamplighter's first action: {kill, hang, gpu_fault,
  node_crash}, each the median of `fault_rounds` faults, every one in
  `detect_to_action_rounds_s`), and what each came from; what is not measured is
  said in `not_measured`;
- `lighthouse`: per replica-group count, `groups`, `quorum_s` (the first quorum's
  formation), `survivor_stall_kill_s` and `survivor_stall_hang_s` (median over
  the kill and the hang rounds), `quorum_after_rejoin_s` (the second quorum change);
- `fits`: each measure as a line in the count, projected to 1,000 and 10,000.

and a plot beside it. A measure missing from the inputs is null, never guessed.

    python -m bench.scale_report [--results bench/results] [--out build/scale/report.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from bench.line_fit import fit_line
from bench.results_io import RESULTS, environment

NOT_MEASURED = {
    "detect_to_action_s.kill": "no size killed a group's task: a trainer's exit is measured by the soak and "
    "bench-stall at 3-12 groups on the 3-7 node lab",
    "detect_to_action_s.hang": "no size hung a group's trainer (the groups ran `sleep`, with no progress to "
    "read): a hang is measured by the soak and bench-stall at 3-12 groups on the 3-7 node lab",
}
KINDS = (
    ("kill", "a trainer killed"),
    ("hang", "a trainer hung"),
    ("gpu_fault", "a GPU fault"),
    ("node_crash", "a node crash"),
)


def _load(folder: Path, name: str) -> dict[str, Any] | None:
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def nodes_records(rpc: dict[str, Any] | None, etcd: dict[str, Any] | None) -> list[dict[str, Any]]:
    by_nodes = {int(r["nodes"]): r for r in (rpc or {}).get("nodes", [])}
    by_hosts = {int(r["hosts"]): r for r in (etcd or {}).get("hosts", [])}
    out = []
    for n in sorted(set(by_nodes) | set(by_hosts)):
        r, e = by_nodes.get(n), by_hosts.get(n)
        out.append(
            {
                "nodes": n,
                "slurmctld_rpc_per_s": None if r is None else round(r["lamplighter_rpc_per_s"], 3),
                # Counted from sdiag's per-user section (root's, the jobs' owner apart), or, in a run from
                # before, by message type, with the jobs' own calls in it.
                "slurmctld_rpc_by_user": None if r is None else r.get("rpc_from") == "sdiag by user",
                # The lab could not keep every job running (CPU-starved): the head's cycle and the times to
                # act measure this machine there. Counted by type, its jobs' requeues and srun calls are in
                # the count too, and the fit leaves the size out.
                "slurm_lab_starved": None if r is None else r.get("jobs_running_at_end", n) < n,
                "slurmctld_rpc_per_s_all": None if r is None else round(r["slurmctld_rpc_per_s"], 3),
                # The jobs' own calls (their srun; Slurm's requeues of them), from their owner's sdiag count.
                "slurmctld_rpc_per_s_jobs": None
                if r is None or "rpc_per_s_by_sender" not in r
                else round(r["rpc_per_s_by_sender"]["jobs_user"], 3),
                "etcd_req_per_host_s": None if e is None else e["etcd_req_per_host_s"],
                "etcd_req_per_host_s_during_move": None if e is None else e["etcd_req_per_host_s_during_move"],
                "host_death_to_group_on_spare_s": None if e is None else e["host_death_to_group_on_spare_s"],
                "host_daemon_cpu_cores_median": None if e is None else e.get("host_daemon_cpu_cores_median"),
                "host_daemon_rss_mb_max": None if e is None else e.get("host_daemon_rss_mb_max"),
                "head_daemon_cpu_cores": None if r is None else r.get("head_daemon_cpu_cores"),
                "compute_daemon_cpu_cores_median": None if r is None else r.get("compute_daemon_cpu_cores_median"),
                "compute_daemon_rss_mb_max": None if r is None else r.get("compute_daemon_rss_mb_max"),
                "head_cycle_s": None if r is None or not r.get("head_cycle_s") else r["head_cycle_s"]["median"],
                "head_cycle_s_max": None if r is None or not r.get("head_cycle_s") else r["head_cycle_s"]["max"],
                # What the cycle grows with: the nodes it probed (all of them, or past head_probe_sweep only
                # the sweep's and those the compute daemons reported silent).
                "head_probed_per_cycle": None
                if r is None or not r.get("head_probed_per_cycle")
                else r["head_probed_per_cycle"]["median"],
                "head_probe_sweep": None if r is None else r.get("head_probe_sweep"),
                "detect_to_action_s": None if r is None else r.get("detect_to_action_s"),
                # Each fault struck this many times (the median above; every sample below); 1 before rounds.
                "fault_rounds": None if r is None or not r.get("detect_to_action_s") else r.get("fault_rounds", 1),
                "detect_to_action_rounds_s": None if r is None else r.get("detect_to_action_rounds_s"),
                # Each kill: when its daemon saw the exit; the rest of its time to act is Slurm's word on the job.
                "kill_exit_seen_rounds_s": None if r is None else r.get("kill_exit_seen_rounds_s"),
                "hang_timeout_s": None if r is None else r.get("hang_timeout_s"),
                # lamplighter's slurmctld RPCs one fault cost over the steady state, to 10 s after its action.
                "slurmctld_rpc_per_fault": None
                if r is None or not r.get("rpc_per_fault")
                else {k: v["lamplighter"] for k, v in r["rpc_per_fault"].items()},
            }
        )
    return out


def lighthouse_records(lh: dict[str, Any] | None) -> list[dict[str, Any]]:
    def med(rounds: list[dict[str, Any]], part: str, key: str) -> tuple[float | None, int]:
        vals = [r[part][key]["median"] for r in rounds if r.get(part) and r[part].get(key)]
        return (statistics.median(vals) if vals else None), len(vals)

    out = []
    for row in (lh or {}).get("rows", []):
        rounds = row.get("rounds", [])
        kill, kills = med(rounds, "kill", "survivor_stall_s")
        hang, hangs = med(rounds, "hang", "survivor_stall_s")
        out.append(
            {
                "groups": row["groups"],
                "quorum_s": row.get("formation_s"),
                "survivor_stall_kill_s": kill,
                "kill_rounds": kills,
                "survivor_stall_hang_s": hang,
                "hang_rounds": hangs,
                # The second quorum change: from the failed group's restart to every group in one quorum again.
                "quorum_after_rejoin_s": med(rounds, "rejoin", "quorum_after_s")[0],
                "lighthouse_cpu_cores": (row.get("steady") or {}).get("lighthouse_cpu_cores"),
            }
        )
    return out


def _past_sweep(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sizes past the head's sweep, where it probes a fixed number of nodes a cycle, when two or more are:
    below it the head probes every node, a step a line through every size would multiply out to 10,000."""
    past = [r for r in nodes if r.get("head_probe_sweep") and r["nodes"] > r["head_probe_sweep"]]
    return past if len({r["nodes"] for r in past if r.get("head_cycle_s") is not None}) >= 2 else nodes


def build(folder: Path) -> dict[str, Any]:
    rpc, etcd, lh = _load(folder, "slurm_rpc_scale"), _load(folder, "etcd_scale"), _load(folder, "lighthouse_scale")
    nodes, light = nodes_records(rpc, etcd), lighthouse_records(lh)

    def line(rows: list[dict[str, Any]], x: str, y: str, resolution: float | None = None) -> dict[str, Any] | None:
        have = [r for r in rows if r.get(y) is not None]
        return fit_line([float(r[x]) for r in have], [float(r[y]) for r in have], resolution)

    windows = [float(r["window_s"]) for r in (rpc or {}).get("nodes", []) if r.get("window_s")]

    def act(kind: str) -> dict[str, Any] | None:
        have = [(r["nodes"], v) for r in nodes if (v := (r.get("detect_to_action_s") or {}).get(kind)) is not None]
        return fit_line([float(n) for n, _ in have], [float(v) for _, v in have])

    return {
        "name": "scale",
        "environment": environment(),
        "sources": {
            k: (v or {}).get("environment", {}).get("commit")
            for k, v in (("slurm_rpc_scale", rpc), ("etcd_scale", etcd), ("lighthouse_scale", lh))
        },
        "goals": {"slurmctld_rpc_per_s": 1.0, "etcd_req_per_host_s": 0.5, "survivor_stall_512_over_4_groups": 2.0},
        "nodes": nodes,
        "lighthouse": light,
        "fits": {
            "slurmctld_rpc_per_s": line(
                [r for r in nodes if r["slurmctld_rpc_by_user"] or not r["slurm_lab_starved"]],
                "nodes",
                "slurmctld_rpc_per_s",
                1.0 / min(windows) if windows else None,  # one RPC in sdiag's window
            ),
            "etcd_req_per_host_s": line(nodes, "nodes", "etcd_req_per_host_s"),
            "head_cycle_s": line(_past_sweep(nodes), "nodes", "head_cycle_s"),
            **{f"detect_to_action_s.{k}": act(k) for k, _ in KINDS},
            "survivor_stall_kill_s": line(light, "groups", "survivor_stall_kill_s"),
            "survivor_stall_hang_s": line(light, "groups", "survivor_stall_hang_s"),
        },
        # A size that measured a trainer's kill (bench/slurm_rpc_scale.py since it kills one) answers the gap.
        "not_measured": {
            k: v
            for k, v in NOT_MEASURED.items()
            if not any((r.get("detect_to_action_s") or {}).get(k.split(".")[1]) is not None for r in nodes)
        },
    }


BEGIN, END = "<!-- scale-report -->", "<!-- /scale-report -->"
KEPT = RESULTS / "scale.json"


def _num(v: float | None, fmt: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{fmt}}{unit}"


def _hang_note(nodes: list[dict[str, Any]]) -> str:
    timeouts = {r["hang_timeout_s"] for r in nodes if r.get("hang_timeout_s") is not None}
    return f" (its hang_timeout_s, {', '.join(f'{t:g}' for t in sorted(timeouts))} s, included)" if timeouts else ""


def _rounds_note(nodes: list[dict[str, Any]]) -> str:
    rounds = {r.get("fault_rounds") or 1 for r in nodes}
    if rounds == {1}:
        return "each a single fault, so a line through them says little"
    return f"the median of {', '.join(str(n) for n in sorted(rounds))} faults of each kind per size"


def render_block(results: Path = RESULTS) -> str:
    """The README's scale tables, from the kept report (bench/results/scale.json), markers included."""
    path = results / KEPT.name
    if not path.exists():
        return f"{BEGIN}\n(no {path.name}: run `make scale` and copy build/scale/report.json there)\n{END}"
    return render_block_of(json.loads(path.read_text()))


def render_block_of(rep: dict[str, Any]) -> str:
    """The README's scale tables from a report (build()'s), markers included."""
    commits = sorted({c for c in rep["sources"].values() if c})
    when = rep.get("environment", {}).get("when", "?")
    out = [
        BEGIN,
        "<!-- generated by `python -m bench.report` from bench/results/scale.json: do not edit -->",
        f"From `bench/results/scale.json` (`make scale` at {', '.join(commits) or '?'}, reported {when}), on this "
        "2-core machine:",
        "",
        "| nodes (hosts) | slurmctld RPCs a second from all of lamplighter (goal <= 1) | from the jobs themselves "
        "| etcd requests a second per bare-metal host (goal <= 0.5) | head's cycle, median [max] (nodes it probed) "
        "| trainer killed to its daemon's action | trainer hung to its daemon's action"
        f"{_hang_note(rep['nodes'])} | GPU fault to drain | node crash to drain or mark-down |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rep["nodes"]:
        starved = " (lab CPU-starved: not every job kept running)" if r.get("slurm_lab_starved") else ""
        cycle = (
            "-"
            if r.get("head_cycle_s") is None
            else f"{r['head_cycle_s'] * 1000:.1f} [{r['head_cycle_s_max'] * 1000:.0f}] ms"
        )
        if r.get("head_probed_per_cycle") is not None:
            cycle += f" ({r['head_probed_per_cycle']:.0f})"
        d2a = r.get("detect_to_action_s") or {}
        out.append(
            f"| {r['nodes']} | {_num(r['slurmctld_rpc_per_s'], '.2f')}{starved} "
            f"| {_num(r.get('slurmctld_rpc_per_s_jobs'), '.2f')} | {_num(r['etcd_req_per_host_s'], '.2f')} | {cycle} "
            f"| {_num(d2a.get('kill'), '.2f', ' s')} | {_num(d2a.get('hang'), '.2f', ' s')} "
            f"| {_num(d2a.get('gpu_fault'), '.2f', ' s')} "
            f"| {_num(d2a.get('node_crash'), '.2f', ' s')} |"
        )
    per_fault = [r for r in rep["nodes"] if r.get("slurmctld_rpc_per_fault")]
    if per_fault:
        out += [
            "",
            "slurmctld RPCs one fault cost lamplighter, over its steady state (an `sdiag -r` at the fault, read 10 s "
            "after the first action on it):",
            "",
            "| nodes | trainer killed | trainer hung | GPU fault | node crash |",
            "|---|---|---|---|---|",
        ]
        for r in per_fault:
            f = r["slurmctld_rpc_per_fault"]
            out.append(f"| {r['nodes']} | " + " | ".join(_num(f.get(k), ".0f") for k, _ in KINDS) + " |")
    fits = rep["fits"]
    out += [
        "",
        "Projected (a least-squares line in the count; a falling measure is held at its largest size's value):",
        "",
    ]
    for key, label in (
        ("slurmctld_rpc_per_s", "slurmctld RPCs a second from lamplighter"),
        ("etcd_req_per_host_s", "etcd requests a second per host"),
        ("head_cycle_s", "the head's cycle (median), s, over the sizes past its sweep when two are"),
        ("survivor_stall_kill_s", "survivors' stall on a kill, s"),
        ("survivor_stall_hang_s", "survivors' stall on a hang, s"),
    ):
        f = fits.get(key)
        if f is not None:
            over = ", ".join(f"{x:g}" for x in f["over"])
            out.append(
                f"- {label}: {f['fixed']:.3f} + {f['per_unit']:.5f} per unit over {over}; "
                f"{f['projected']['1000']:.2f} at 1,000 and {f['projected']['10000']:.2f} at 10,000."
            )
    sized = [r for r in rep["nodes"] if r.get("detect_to_action_s")]
    if len(sized) >= 2:
        small, big = sized[0], sized[-1]
        ratios = []
        for kind, label in KINDS:
            a, b = small["detect_to_action_s"].get(kind), big["detect_to_action_s"].get(kind)
            if a and b is not None:
                ratios.append(f"{label} {b / a:.2f}x")
        if ratios:
            out.append(
                f"- Detection to action at {big['nodes']} nodes against {small['nodes']} (goal: within 1.5x; "
                f"{_rounds_note(sized)}): {', '.join(ratios)}."
            )
    seen = [r for r in rep["nodes"] if r.get("kill_exit_seen_rounds_s")]
    if seen:
        parts = []
        for r in seen:
            got = [v for v in r["kill_exit_seen_rounds_s"] if v is not None]
            if got:
                parts.append(f"{min(got):.2f}-{max(got):.2f} s at {r['nodes']}")
        out.append(
            "- A killed trainer's exit was seen by its daemon "
            + ", ".join(parts)
            + " after the kill; the rest of its time to act is the wait for Slurm to say the job ended."
        )
    light = [r for r in rep["lighthouse"] if r.get("survivor_stall_kill_s") is not None]
    if len(light) >= 2:
        small, big = light[0], light[-1]
        parts = [
            f"{kind} {big[key] / small[key]:.2f}x"
            for kind, key in (("a kill", "survivor_stall_kill_s"), ("a hang", "survivor_stall_hang_s"))
            if small.get(key) and big.get(key) is not None
        ]
        out.append(
            f"- The survivors' stall at {big['groups']} groups against {small['groups']} (goal: within 2x): "
            f"{', '.join(parts)}."
        )
    out += [
        "",
        "torchft's Lighthouse with N torch-free replica groups (one quorum a step, 0.5-s steps), one group killed or "
        "hung (SIGSTOP) at a time and started again:",
        "",
        "| groups | first quorum | survivors' stall, kill | survivors' stall, hang | restart to one quorum of all "
        "| Lighthouse CPU |",
        "|---|---|---|---|---|---|",
    ]
    for r in rep["lighthouse"]:
        out.append(
            f"| {r['groups']} | {_num(r['quorum_s'], '.2f', ' s')} | {_num(r['survivor_stall_kill_s'], '.2f', ' s')} "
            f"| {_num(r.get('survivor_stall_hang_s'), '.2f', ' s')} | {_num(r.get('quorum_after_rejoin_s'), '.2f', ' s')} "
            f"| {_num(r['lighthouse_cpu_cores'], '.2f', ' cores')} |"
        )
    if rep.get("not_measured"):
        out += ["", "Not measured: " + "; ".join(f"`{k}`: {v}" for k, v in rep["not_measured"].items()) + "."]
    return "\n".join(out + [END])


def plot(report: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = [
        (report["nodes"], "nodes", "slurmctld_rpc_per_s", "slurmctld RPC/s from lamplighter", 1.0),
        (report["nodes"], "nodes", "etcd_req_per_host_s", "etcd requests/s per host", 0.5),
        (report["lighthouse"], "groups", "survivor_stall_kill_s", "survivors' stall on a kill (s)", None),
    ]
    for ax, (rows, x, y, title, goal) in zip(axes, panels, strict=True):
        have = [r for r in rows if r.get(y) is not None]
        # A size the Slurm lab could not keep whole (CPU-starved), counted by message type, is drawn apart: its
        # count holds the jobs' own calls.
        starved = [
            r
            for r in have
            if y.startswith("slurmctld") and r.get("slurm_lab_starved") and not r.get("slurmctld_rpc_by_user")
        ]
        kept = [r for r in have if r not in starved]
        ax.plot([r[x] for r in kept], [r[y] for r in kept], "o-")
        if starved:
            ax.plot([r[x] for r in starved], [r[y] for r in starved], "x", color="red", label="lab CPU-starved")
        if goal is not None:
            ax.axhline(goal, color="grey", ls="--", lw=1, label=f"goal {goal:g}")
        if goal is not None or starved:
            ax.legend(loc="upper left", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(x)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=RESULTS, help="where the scale benches wrote their files")
    ap.add_argument("--out", type=Path, default=Path("build/scale/report.json"))
    args = ap.parse_args(argv)
    report = build(args.results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.out.with_suffix(".png"))
    for r in report["nodes"]:
        print(
            f"{r['nodes']:3d} nodes: slurmctld {r['slurmctld_rpc_per_s']} RPC/s from lamplighter, "
            f"etcd {r['etcd_req_per_host_s']} requests/s per host"
        )
    for r in report["lighthouse"]:
        print(
            f"{r['groups']:4d} groups: quorum {r['quorum_s']:.2f} s, survivors' stall {r['survivor_stall_kill_s']} s "
            f"(kill), {r['survivor_stall_hang_s']} s (hang)"
        )
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
