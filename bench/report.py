"""The benchmark tables of docs/results.md and bench/README.md, from bench/results alone: `python -m bench.report [--write FILE ...]`.

Prints, as markdown, in this order: the runs' stamps; what one fault costs, per kind and strategy
(fault_cost.json); goodput under identical delivered faults, small and big state, with the regime it
was measured in (goodput.json, goodput_big.json); `lamplighter plan`'s range at 1k and 16k GPUs for 8B
and 70B next to published figures; the model check (model_check.json); the survivors' stall against
the group count (stall_groups.json); heal bandwidth next to memcpy (heal_bandwidth.json); restart to
first commit with and without warm standbys; lamplighter's own costs. Every number is read from a
result file, or computed by `lamplighter plan` (the command is named); a file that some other run wrote
is named as such.

docs/results.md and bench/README.md embed this output between the markers
`<!-- bench-report -->` and `<!-- /bench-report -->`; docs/results.md also holds
each demo's table (bench/demo_tables.py). `--write FILE` replaces every such
block FILE holds, and `make test` checks that both files hold what this prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench import demo_tables, scale_report
from bench.results_io import GENERATED_NOTE, RESULTS

BEGIN, END = "<!-- bench-report -->", "<!-- /bench-report -->"
# The files `make bench` writes, by part (bench/__main__.py): each should carry the run's stamp.
FILES = {
    "goodput": ("goodput",),
    "big": ("goodput_big",),
    "cost": ("fault_cost",),
    "model": ("model_check",),
    "warm": ("warm_restart",),
    "warm-slurm": ("warm_restart_slurm",),
    "overhead": ("overhead",),
    "quorum": ("lighthouse_quorum",),
    "gpu-probe": ("gpu_probe_cost",),
    "daemon": ("daemon_cost",),
    "prolog": ("prolog_cost",),
}
# Parts with a make target of their own: their files carry that run's stamp, from bench_run_<part>.json.
SEPARATE = {"heal": ("heal_bandwidth", "make bench-heal"), "stall": ("stall_groups", "make bench-stall")}
# Files computed from other files alone (no measurement): they belong to the run their sources came from.
DERIVED = {"model_check": ("goodput", "fault_cost")}
HEAL_TRANSPORTS = ("http", "http-torchft", "pg", "pg-inplace", "tcp")
PROJECTIONS = ((1024, "8b"), (1024, "70b"), (16384, "8b"), (16384, "70b"))
STRATEGY_ORDER = ("lamplighter", "lamplighter-spare", "poll-10s", "in-job-restart", "ckpt-restart")


def load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def older_harness(doc: dict[str, Any], name: str) -> bool:
    """A goodput or model-check file written before identical delivered faults (#30): its runs had a step
    target and a gated injector, so its numbers answer another question and are not shown."""
    if name.startswith("goodput"):
        return "regime" not in doc.get("config", {})
    if name == "model_check":
        return "fault_cost" not in doc.get("source", {})
    return False


def older_harness_line(doc: dict[str, Any], name: str) -> str:
    return (
        f"bench/results/{name}.json is from the harness before identical delivered faults (commit "
        f"{doc['environment'].get('commit')}): not shown; `make bench` replaces it."
    )


def rng(cell: dict[str, Any] | None, fmt: str = ".2f") -> str:
    """median [min-max] of a results_io.spread cell; '-' when there is none."""
    if not cell or not cell.get("n"):
        return "-"
    if cell["min"] == cell["max"]:
        return f"{cell['median']:{fmt}}"
    return f"{cell['median']:{fmt}} [{cell['min']:{fmt}}-{cell['max']:{fmt}}]"


def stamp_lines(results: Path) -> list[str]:
    run = load(results, "bench_run")
    if run is None:
        return ["No `make bench` run is recorded (bench/results/bench_run.json is missing)."]
    src = run["source"]
    stamp = run["environment"].get("bench_run")
    parts = ", ".join(f"{k} {v / 60:.1f}" for k, v in run["parts_s"].items())
    lines = [
        f"From one `make bench` at commit {src['commit']}, started {src['when']}, on this machine "
        f"({src['host_cpus']} cores, torch {src['torch']}, torchft {src['torchft']}): "
        f"{run['total_s'] / 60:.1f} minutes in all (minutes per part: {parts}).",
    ]
    if run.get("quick"):
        lines.append("**A `--quick` smoke run: not results.**")
    if run.get("failed"):
        lines.append(f"**Parts that failed:** {', '.join(sorted(run['failed']))}.")
    other, recomputed = [], []
    for names in FILES.values():
        for name in names:
            doc = load(results, name)
            if doc is None:
                other.append(f"{name}.json (missing)")
            elif doc["environment"].get("bench_run") == stamp:
                continue
            elif name in DERIVED and all(doc["source"].get(s, {}).get("bench_run") == stamp for s in DERIVED[name]):
                sources = " and ".join(f"{s}.json" for s in DERIVED[name])
                recomputed.append(
                    f"{name}.json was recomputed from its {sources} at commit {doc['environment'].get('commit')}"
                )
            else:
                other.append(f"{name}.json (commit {doc['environment'].get('commit')}, another run)")
    for part, (name, target) in SEPARATE.items():
        own = load(results, f"bench_run_{part}")
        doc = load(results, name)
        if own is None or doc is None:
            other.append(f"{name}.json ({target}: missing)")
            continue
        o = own["source"]
        quick = ", a --quick smoke run" if own.get("quick") else ""
        same = "" if o["commit"] == src["commit"] else " (**another commit**)"
        lines.append(
            f"{name}.json: from `{target}`{quick} at commit {o['commit']}{same}, started {o['when']}, "
            f"{own['total_s'] / 60:.1f} minutes."
        )
        if doc["environment"].get("bench_run") != own["environment"].get("bench_run"):
            other.append(f"{name}.json (not the one {target} recorded)")
    if other:
        lines.append("Files from other runs: " + "; ".join(other) + ".")
    else:
        lines.append("Every file below comes from these runs" + (f" ({'; '.join(recomputed)})." if recomputed else "."))
    return lines


def cost_lines(results: Path) -> list[str]:
    doc = load(results, "fault_cost")
    if doc is None:
        return ["No per-fault costs (bench/results/fault_cost.json is missing)."]
    cfg = doc["config"]
    out = [
        f"**What one fault costs**, one at a time, the job whole for {cfg['settle_s']:g} s before each "
        f"({cfg['replicas']} replica groups, {cfg['n']} faults of each kind per strategy; median [range], seconds "
        f"after the fault; never: not within {cfg['cap_s']:g} s, when the harness ended the stuck process):",
        "",
        "| fault | strategy | n | detected | the group trains again (ckpt-restart: the job) | survivors' stall "
        "| their stall at its return | every group in the quorum again | job-seconds lost |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, per in doc["table"].items():
        for s in (x for x in STRATEGY_ORDER if x in per):
            c = per[s]
            never, n = c["never"], c["n"]
            back = f"never ({never} of {n})" if never == n else rng(c["back_s"], ".1f")
            whole = f"never ({never} of {n})" if never == n else rng(c["whole_s"], ".1f")
            if 0 < never < n:
                back, whole = f"{back}; never {never} of {n}", f"{whole}; never {never} of {n}"
            lost = rng(c["lost_job_s"], ".1f") + (f" (to the {cfg['cap_s']:g} s cap)" if never else "")
            out.append(
                f"| {kind} | {s} | {n} | {rng(c['detect_s'], '.1f')} | {back} | {rng(c['stall_s'], '.1f')} "
                f"| {rng(c.get('rejoin_stall_s'), '.1f')} | {whole} | {lost} |"
            )
    out += [
        "",
        "Job-seconds lost: the whole job's training time the fault cost, from its committed samples against the "
        "job's rate before it (a group out costs its share, a stall every group's, a rollback what is redone): "
        "what `lamplighter plan` scales by a cluster's fault rate and group count.",
    ]
    return out


def goodput_lines(results: Path) -> list[str]:
    doc = load(results, "goodput")
    if doc is None:
        return ["No goodput runs (bench/results/goodput.json is missing)."]
    if older_harness(doc, "goodput"):
        olds = [older_harness_line(d, n) for n in ("goodput", "goodput_big") if (d := load(results, n)) is not None]
        return ["**Goodput under identical delivered faults:** " + " ".join(olds)]
    cfg = doc["config"]
    reg, w = cfg["regime"], cfg["workload"]
    per_run = sorted(len(s["faults"]) for s in doc["schedules"])
    mean = sum(per_run) / max(1, len(per_run))
    job_mtbf = (reg["window_s"] - 3.0) / max(1.0, mean)
    out = [
        "**Goodput under identical delivered faults.** Per repetition one schedule of (time after the first "
        "commit, group, kind), the same for every strategy and delivered at its time whatever the target's "
        f"state: each of the {w['replicas']} groups fails once per {reg['group_mtbf_s']:g} s on average (windows "
        f"at a random phase per group), kinds drawn from {', '.join(reg['kinds'])}, never every group within "
        f"{reg['guard_s']:g} s; {per_run[0]}-{per_run[-1]} faults per run, a job MTBF of about {job_mtbf:.1f} s. "
        f"Every run trains {reg['window_s']:g} s from its own first commit (no step target); the torchft "
        f"strategies keep a fallback checkpoint every {w['fallback_interval_s']:g} s. Every strategy of a "
        f"repetition got the same faults: {'yes' if doc.get('same_faults_in_every_repetition') else '**no**'} "
        "(goodput.json lists them, with each one's outcome, per run).",
        "",
        "**Regime:** a fault every few seconds on 3 groups is about 100x denser, at the job level, than Llama 3's "
        "16k-GPU cluster; here faults overlap and strike groups still recovering. This is a stress test that "
        "checks the per-fault costs compose (the model check below), not a ranking for a real cluster: for that, "
        "the per-fault costs above and `lamplighter plan`'s range below.",
        "",
        "| state | strategy | faults per run: delivered, struck, absorbed | goodput over plain DDP's fault-free "
        "rate | goodput / own fault-free | steps redone after a rollback |",
        "|---|---|---|---|---|---|",
    ]
    pairs, frees = [], []
    for name, label in (("goodput", "small"), ("goodput_big", "+1 GB")):
        d = load(results, name)
        if d is None or older_harness(d, name):
            out.append(f"| {label} | {older_harness_line(d, name) if d else f'{name}.json is missing'} | | | | |")
            continue
        for s in (x for x in STRATEGY_ORDER if x in d["table"]):
            c = d["table"][s]
            counts = f"{rng(c['delivered'], '.0f')}, {rng(c['struck'], '.0f')}, {rng(c['absorbed'], '.0f')}"
            out.append(
                f"| {label} | {s} | {counts} | {rng(c['goodput_abs'])} | {rng(c['goodput_rel'])} "
                f"| {rng(c['steps_lost'], '.0f')} |"
            )
        ff = d["fault_free"]
        frees.append(
            f"| {label} | {rng((ff.get('ddp') or {}).get('samples_per_s'), '.0f')} "
            f"| {rng((ff.get('torchft') or {}).get('over_yardstick'))} "
            f"| {rng((ff.get('ckpt-restart') or {}).get('over_yardstick'))} | {d['config']['reps']} |"
        )
        for pair, cell in sorted(d["ratios"].items()):
            ours, other = pair.split("/")
            pairs.append(f"| {ours} | {other} | {label} | {rng(cell)} |")
    out += [
        "",
        "| state | plain DDP fault-free, samples/s (the yardstick) | torchft fault-free over it | checkpoint-restart "
        "fault-free over it | repetitions |",
        "|---|---|---|---|---|",
        *frees,
        "",
        "| samples/s of | over, paired by repetition (same faults) | state | median [range] |",
        "|---|---|---|---|",
        *pairs,
    ]
    return out


def plan_lines() -> list[str]:
    from lamplighter.plan import goodput_model as gm
    from lamplighter.plan import ranges as rg

    out = [
        "**`lamplighter plan`'s range** (`lamplighter plan --gpus N --model M`: Llama 3's failure rate; central "
        "[low-high], where low and high have every uncertain input pessimistic or optimistic at once, named "
        "below): goodput against plain synchronous training with nothing failing.",
        "",
        "| GPUs | model | lamplighter | poll runner (10 s) | in-job restart | checkpoint-restart |",
        "|---|---|---|---|---|---|",
    ]
    for gpus, size in PROJECTIONS:
        preset = gm.MODELS[size]
        cluster = gm.Cluster(gpus=gpus, group_gpus=preset.group_gpus)
        by = rg.ranges(cluster, gm.Workload(params=preset.params), gm.Costs(), {})
        cells = []
        for name in ("lamplighter", "poll-10s", "in-job-restart", "ckpt-restart"):
            g = [next(r for r in by[s][2] if r.strategy == name).goodput for s in rg.SCENARIOS]
            cells.append(f"{g[1]:.3f} [{g[0]:.3f}-{g[2]:.3f}]")
        out.append(f"| {gpus} | {size} | " + " | ".join(cells) + " |")
    out += ["", "| assumption, at 16,384 GPUs, 70B | low | central | high |", "|---|---|---|---|"]
    cluster = gm.Cluster(gpus=16384, group_gpus=gm.MODELS["70b"].group_gpus)
    for label, cells in rg.assumption_rows(cluster, {}):
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out += ["", "Published, for comparison:", ""]
    out += [f"- {p.source}: {p.figure} ({p.scale})." for p in rg.PUBLISHED]
    return out


def model_lines(results: Path) -> list[str]:
    doc = load(results, "model_check")
    if doc is None:
        return []
    if older_harness(doc, "model_check"):
        return ["**The model check:** " + older_harness_line(doc, "model_check")]
    out = [
        "**The model check**: the per-fault costs above, composed by `lamplighter plan`'s rule (a fault takes its "
        "group out until it trains again and stalls the others; overlapping windows count once) and replayed on "
        "the faults that struck each small-state goodput run, against the goodput measured there (over its own "
        f"fault-free run; tolerance {doc['tolerance']:.0%}; bench/results/model_check.json):",
        "",
        "| strategy | runs | measured | replayed | error |",
        "|---|---|---|---|---|",
    ]
    for strategy, r in sorted(doc["strategies"].items()):
        m = r["median"]
        if m is None:
            continue
        flag = "" if m["within_tolerance"] else " (outside the tolerance)"
        out.append(
            f"| {strategy} | {len(r['runs'])} | {m['measured']:.3f} | {m['replay']:.3f} | {m['error']:+.1%}{flag} |"
        )
    return out


def stall_lines(results: Path) -> list[str]:
    doc = load(results, "stall_groups")
    if doc is None:
        return []
    table = doc["table"]
    sizes = sorted({int(g) for per in table.values() for g in per})
    out = [
        "**Survivors' stall against the number of groups** (`make bench-stall`: local mode, one fault at a time; "
        "the worst survivor's extra gap between two commits, median [range], seconds; kill: SIGKILL; node-crash: "
        "the peer goes silent, SIGSTOP; hang: blocked in its step while its heartbeats go on):",
        "",
        "| fault | " + " | ".join(f"{g} groups" for g in sizes) + " | fit | at the rejoin (by size) |",
        "|---|" + "---|" * (len(sizes) + 2),
    ]
    for kind, per in table.items():
        f = doc["fit"].get(kind)
        fit = "-" if not f else f"{f['base_s']:.2f} + {f['per_group_s']:.3f} x groups"
        cells = [rng(per.get(str(g), {}).get("stall_max_s")) for g in sizes]
        rejoin = " / ".join(rng(per.get(str(g), {}).get("rejoin_stall_max_s")) for g in sizes)
        out.append(f"| {kind} | " + " | ".join(cells) + f" | {fit} | {rejoin} |")
    for size in doc.get("sizes", []):
        if not size.get("faults"):  # a size that yielded no stall is said, not dropped from the table silently
            missed = size.get("chaos_missed") or []
            out += [
                "",
                f"{size['groups']} groups: no stall measured; {len(missed)} planned fault(s) found no process "
                f"(first: {missed[0]['why'] if missed else '-'}): see bench/results/stall_groups.json.",
            ]
    kill = table.get("kill", {})
    parts = ("failed_step_s", "quorum_s", "pg_s", "step_s")
    if kill:
        where = [
            f"{g} groups: "
            + ", ".join(
                f"{p.removesuffix('_s').replace('_', ' ')} {(kill[str(g)].get(p) or {}).get('median', 0):.2f}"
                for p in parts
            )
            for g in sizes
            if str(g) in kill
        ]
        out += ["", "Where a kill's stall goes (the worst survivor, median seconds): " + "; ".join(where) + "."]
    return out


def heal_lines(results: Path) -> list[str]:
    doc = load(results, "heal_bandwidth")
    if doc is None:
        return []
    by = {(r["transport"], r["state_bytes"]): r for r in doc["results"]}
    sizes = sorted({r["state_bytes"] for r in doc["results"]})
    transports = [t for t in HEAL_TRANSPORTS if any(k[0] == t for k in by)]
    out = [
        f"**Heal bandwidth**, GB/s (a fresh process receives a live peer's state over loopback; "
        f"{doc['config']['reps']} transfer(s) each, hash-checked; in brackets, the share of memcpy here):",
        "",
        "| state | " + " | ".join(transports) + " | memcpy |",
        "|---|" + "---|" * (len(transports) + 1),
    ]
    for size in sizes:
        mem = next((m for m in doc["memcpy"].values() if m.get("bytes") == size), None)
        copy = None if mem is None else mem["copy_gbps"]["median"]
        cells = []
        for t in transports:
            r = by.get((t, size))
            if r is None or not r.get("verified") or "gbps" not in r:
                cells.append("-")
                continue
            g = r["gbps"]["median"]
            cells.append(f"{g:.2f}" + (f" ({g / copy:.0%})" if copy else ""))
        cells.append("-" if copy is None else f"{copy:.1f}")
        out.append(f"| {size / 1e9:g} GB | " + " | ".join(cells) + " |")
    return out


def render(results: Path = RESULTS) -> str:
    blocks = [
        stamp_lines(results),
        cost_lines(results),
        goodput_lines(results),
        plan_lines(),
        model_lines(results),
        stall_lines(results),
        heal_lines(results),
        warm_lines(results),
        own_cost_lines(results),
    ]
    body = "\n\n".join("\n".join(b) for b in blocks if b)
    return f"{BEGIN}\n{GENERATED_NOTE}\n{body}\n{END}"


def warm_row(label: str, cold: dict[str, Any], warm: dict[str, Any]) -> str:
    ratio = warm["median"] / cold["median"]
    return f"| {label} | {rng(cold)} s | {rng(warm)} s | {ratio:.2f} | {cold['n']}, {warm['n']} |"


def warm_lines(results: Path) -> list[str]:
    out = [
        "| restart to first commit | cold | warm standby | warm / cold | restarts (cold, warm) |",
        "|---|---|---|---|---|",
    ]
    local = load(results, "warm_restart")
    if local is not None:
        a = local["per_arm"]
        c, w = a["cold"]["first_commit_after_restart_s"], a["warm"]["first_commit_after_restart_s"]
        out.append(warm_row("local mode, the demo job (restart decided -> first commit)", c, w))
    slurm = load(results, "warm_restart_slurm")
    if slurm is not None and "spare" in slurm["summary"] and "cold" in slurm["summary"]:
        s = slurm["summary"]
        c, w = s["cold"]["kill_to_commit_s"], s["spare"]["kill_to_commit_s"]
        out.append(warm_row("Slurm lab, in-job agent (kill -> first commit; warm: the in-job spare)", c, w))
    return out if len(out) > 2 else []


def own_cost_lines(results: Path) -> list[str]:
    out = ["| cost | measured |", "|---|---|"]
    over = load(results, "overhead")
    for row in (over or {}).get("rows", []):
        out.append(
            f"| torchft step against plain DDP, {row['model'].split(' (')[0]} model, 2 replicas, no accelerator time "
            f"| {row['torchft_extra_ms_per_step']['median']:+.1f} ms per step "
            f"(throughput x{row['torchft_throughput_vs_ddp']['median']:.2f}) |"
        )
    quorum = load(results, "lighthouse_quorum")
    for row in (quorum or {}).get("rows", []):
        if row["groups"] in (2, 64):
            out.append(f"| Lighthouse quorum, {row['groups']} groups | {rng(row['quorum_s'], '.4f')} s |")
    probe = load(results, "gpu_probe_cost")
    if probe is not None:
        out.append(
            f"| GPU check through amdsmi, {probe['gpus']} simulated GPUs | {probe['cpu_s_per_cycle']:.4f} CPU-s per "
            f"cycle ({100 * probe['core_fraction_at_poll_interval']:.2f}% of a core at 1 s) |"
        )
        idle = probe.get("idle_probe_interval_s_default")
        by = probe.get("core_fraction_by_interval_s", {})
        if idle is not None and f"{idle:g}" in by:
            out.append(
                f"| GPU check on a node with no lamplighter trainer, every {idle:g} s (`idle_probe_interval_s`) "
                f"| {100 * by[f'{idle:g}']:.3f}% of a core |"
            )
    prolog = load(results, "prolog_cost")
    if prolog is not None:
        out.append(
            f"| Prolog (`lamplighter healthcheck --prolog`), {prolog['gpus']} simulated GPUs, per job start "
            f"| median {prolog['wall_s']['median']:.2f} s, p99 {prolog['wall_s']['p99']:.2f} s "
            f"({prolog['runs']} starts) |"
        )
    daemon = load(results, "daemon_cost")
    if daemon is not None:
        cfg = daemon["config"]
        out.append(
            f"| node daemon, {cfg['gpus']} GPUs, {cfg['trainers']} trainers adopted, {cfg['poll_interval_s']:g} s poll "
            f"| {100 * daemon['cpu_core_fraction_daemon']:.2f}% of a core, {daemon['rss_mb_daemon']:.0f} MB RSS "
            f"({100 * daemon['cpu_core_fraction_daemon_and_workers']:.2f}% and "
            f"{daemon['rss_mb_daemon_and_workers']:.0f} MB with its GPU probe workers) |"
        )
        readers = daemon.get("user_readers")
        if readers is not None:
            out.append(
                f"| its readers as the job's user (zygote + {readers['processes'] - 1} helpers: job.json, lighthouse.json, "
                f"/status every poll) | {100 * readers['cpu_core_fraction']:.2f}% of a core, "
                f"{readers['uss_mb']:.0f} MB of their own (USS; {readers['rss_mb']:.0f} MB RSS, shared with the daemon) |"
            )
        before = daemon.get("compared")
        if before is not None:
            out.append(
                f"| the same daemon at {before['checkout']['commit']} (same run, parsing as root) "
                f"| {100 * before['cpu_core_fraction_daemon']:.2f}% of a core, {before['rss_mb_daemon']:.0f} MB RSS |"
            )
    return out if len(out) > 2 else []


def embedded(text: str, begin: str = BEGIN, end: str = END) -> str | None:
    """The block between the markers, markers included, or None."""
    start, stop = text.find(begin), text.find(end)
    return None if start < 0 or stop < start else text[start : stop + len(end)]


def blocks(results: Path = RESULTS) -> list[tuple[str, str, str]]:
    """(begin, end, text) of every block this module writes: the benchmark's, and each demo's."""
    out = [(BEGIN, END, render(results))]
    for mode in demo_tables.MODES:
        begin, end = demo_tables.markers(mode)
        out.append((begin, end, demo_tables.render_mode(results, mode)))
    from bench import slurm_timings  # it brings the lab's cluster with it: only when asked

    out.append((slurm_timings.BEGIN, slurm_timings.END, slurm_timings.render_block(results)))
    out.append((scale_report.BEGIN, scale_report.END, scale_report.render_block(results)))
    return out


def rewrite(text: str, results: Path = RESULTS) -> tuple[str, int]:
    """The text with every block it holds replaced, and how many it held."""
    found = 0
    for begin, end, block in blocks(results):
        old = embedded(text, begin, end)
        if old is not None:
            text, found = text.replace(old, block), found + 1
    return text, found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n")[0])
    ap.add_argument("--write", type=Path, action="append", default=[], help="replace the blocks in FILE")
    args = ap.parse_args(argv)
    if not args.write:
        print("\n\n".join(block for _, _, block in blocks()))
    for path in args.write:
        text, found = rewrite(path.read_text())
        if not found:
            print(f"{path}: no {BEGIN} ... {END} (or demo-report) block to replace", file=sys.stderr)
            return 2
        path.write_text(text)
        print(f"{path}: {found} generated block(s) rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
