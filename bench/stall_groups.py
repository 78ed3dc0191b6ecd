"""The survivors' stall against the number of groups: `python -m bench.stall_groups` (make bench-stall).

For each group count (3, 6, 12), one `lamplighter local` job (the reference trainer, timed by
bench/stall_trainer.py; steps paced by trainer.model.step_sleep_s, as lab jobs are) takes one fault at a
time, `gap_s` apart, rotating over the kinds and over the groups but group 0:
  kill             SIGKILL: the kernel closes its sockets, so a peer's collective fails at once;
  node-crash       SIGSTOP: the peer goes silent, no FIN, no RST, no heartbeat, which is what survivors see
                   of a node that lost power (the lab's node crash kills a PID namespace, and the kernel
                   then closes the sockets: a kill to the survivors, so it cannot show this); the local
                   supervisor ends it as a hang;
  hang             hang-collective: the trainer blocks inside its step while its process and heartbeats go on
                   (the symptom of a hung NCCL collective).
Per fault and survivor, from the step logs and the timing events: the stall at the fault (the gap between
two commits that holds it, minus the survivor's usual step), and at the rejoin (the gap before its first
commit in a quorum of every group again), and where the time at the fault went:
  failed_step_s   fault -> the survivor asks the Lighthouse for the next quorum (its step in flight fails:
                  at once after a kill, after the process group's timeout for a silent or stuck peer)
  quorum_s        that request -> the Lighthouse's answer (it waits for the dead member's heartbeat to
                  expire, or for stragglers)
  pg_s            the process group's reconfiguration for the new quorum (every member connects to every other)
  step_s          the rest, to the first commit (the new step's forward, allreduce and vote)
Writes bench/results/stall_groups.json and .png; a linear fit of each kind's median stall against the group
count is what `lamplighter plan` takes (its --stall-base-s and --stall-per-group-s).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bench.jobspec import BUILD, REPO
from bench.line_fit import least_squares
from bench.results_io import RESULTS, spread, write_result
from lamplighter.rundir.steplog import StepRecord, read_steps

# Labels of the results -> the local-mode chaos kind that delivers it (see the module docstring).
KINDS = {"kill": "kill", "node-crash": "hang", "hang": "hang-collective"}
STEP_SLEEP_S = 0.2
FIRST_S = 8.0  # the first fault, after the first commit: every group has joined by then
TAIL_S = 14.0  # after the last fault: its recovery and the rejoin


def job(groups: int, steps: int = 1_000_000) -> dict[str, Any]:
    """The benchmark's torchft tuning (bench.jobspec), a small model, steps paced, warm restarts."""
    return {
        "name": f"stall-{groups}",
        "trainer": {
            "steps": steps,
            "command": ["{python}", "-m", "bench.stall_trainer", "--config", "{config}"],
            "env": {"PYTHONPATH": str(REPO)},
            "model": {"dim": 64, "layers": 2, "heads": 4, "seq_len": 32, "batch_size": 8, "step_sleep_s": STEP_SLEEP_S},
            "checkpoint": {"enabled": False},
        },
        "groups": {"count": groups},
        "lighthouse": {
            "port": 0,
            "min_replicas": 1,
            "quorum_tick_ms": 20,
            "join_timeout_ms": 1000,
            "heartbeat_timeout_ms": 500,
        },
        "torchft": {"pg_timeout_s": 3, "timeout_s": 3, "quorum_timeout_s": 4, "connect_timeout_s": 10},
        "health": {"hang_timeout_s": 5, "poll_interval_s": 0.5},
        "restart": {"budget_per_group": 100, "backoff_initial_s": 0, "crash_loop_max": 100, "standby": 1},
    }


def schedule(groups: int, kinds: list[str], n: int, gap_s: float) -> list[dict[str, Any]]:
    """One fault every gap_s from FIRST_S, kinds interleaved, targets rotating over groups 1..N-1 (pure)."""
    out = []
    for i, (_, kind) in enumerate(itertools.product(range(n), kinds)):
        out.append({"at_s": round(FIRST_S + i * gap_s, 3), "kind": KINDS[kind], "group": 1 + i % (groups - 1)})
    return out


def read_events(run_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """Each group's timing events (every process of it), in time order."""
    out: dict[int, list[dict[str, Any]]] = {}
    for path in sorted((run_dir / "timing").glob("*.jsonl")):
        group = int(path.name.split("-")[0])
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        out.setdefault(group, []).extend(lines)
    return {g: sorted(es, key=lambda e: e["t"]) for g, es in out.items()}


def normal_step(c: list[StepRecord], t0: float) -> float | None:
    before = [r.t for r in c if r.t <= t0][-20:]
    return statistics.median(b - a for a, b in itertools.pairwise(before)) if len(before) >= 3 else None


def survivor_at_fault(c: list[StepRecord], events: list[dict[str, Any]], t0: float) -> dict[str, Any] | None:
    """One survivor's stall at a fault at t0, and where it went (see the module docstring)."""
    normal = normal_step(c, t0)
    last = next((r.t for r in reversed(c) if r.t <= t0), None)
    nxt = next((r.t for r in c if r.t > t0), None)
    if normal is None or last is None or nxt is None:
        return None
    within = [e for e in events if t0 < e["t"] <= nxt]
    lh = [e for e in within if e["e"] == "lh_start"]
    ask = lh[-1]["t"] if lh else None  # the request that got the quorum it committed in
    answer = next((e["t"] for e in within if e["e"] == "lh_done" and ask is not None and e["t"] >= ask), None)
    pg0 = next((e["t"] for e in within if e["e"] == "pg_start" and answer is not None and e["t"] >= answer), None)
    pg1 = next((e["t"] for e in within if e["e"] == "pg_done" and pg0 is not None and e["t"] >= pg0), None)
    out = {
        "stall_s": round(max(0.0, nxt - last - normal), 3),
        "normal_step_s": round(normal, 3),
        "failed_step_s": None if ask is None else round(ask - t0, 3),
        "quorum_s": None if ask is None or answer is None else round(answer - ask, 3),
        "pg_s": None if pg0 is None or pg1 is None else round(pg1 - pg0, 3),
        "step_s": round(nxt - (pg1 or answer or t0), 3),
        "errors": sum(e["e"] == "error" for e in within),
        "quorums": len(lh),
    }
    return out


def survivor_at_rejoin(c: list[StepRecord], groups: int, t0: float) -> float | None:
    """The gap before this survivor's first commit after t0 in a quorum of every group, minus its usual step."""
    normal = normal_step(c, t0)
    for a, b in itertools.pairwise(c):
        if b.t > t0 and a.t > t0 and b.participants == groups and a.participants < groups:
            return None if normal is None else round(max(0.0, b.t - a.t - normal), 3)
    return None


def analyse(report: dict[str, Any], run_dir: Path, groups: int) -> list[dict[str, Any]]:
    """Per fault: its kind and the survivors' stalls (max and median over survivors) and their parts (pure)."""
    label = {v: k for k, v in KINDS.items()}
    steps = {
        g: sorted((r for r in read_steps(run_dir / "steps" / f"{g}.jsonl") if r.committed), key=lambda r: r.t)
        for g in range(groups)
    }
    events = read_events(run_dir)
    rows = []
    for f in report.get("faults", []):
        if f.get("kind") not in label or f.get("t_injected") is None:
            continue
        t0, hit = f["t_injected"], f.get("group")
        per = [survivor_at_fault(steps[g], events.get(g, []), t0) for g in range(groups) if g != hit]
        seen = [p for p in per if p is not None]
        rejoin = [survivor_at_rejoin(steps[g], groups, t0) for g in range(groups) if g != hit]
        rejoined = [r for r in rejoin if r is not None]
        if not seen:
            continue
        worst = max(seen, key=lambda p: p["stall_s"])
        rows.append(
            {
                "kind": label[f["kind"]],
                "group": hit,
                "t_injected": t0,
                "survivors": len(seen),
                "stall_max_s": worst["stall_s"],
                "stall_median_s": round(statistics.median(p["stall_s"] for p in seen), 3),
                "rejoin_stall_max_s": max(rejoined) if rejoined else None,
                "parts_of_worst": {k: worst[k] for k in ("failed_step_s", "quorum_s", "pg_s", "step_s", "quorums")},
                "parts_median": {
                    k: _median([p[k] for p in seen]) for k in ("failed_step_s", "quorum_s", "pg_s", "step_s")
                },
            }
        )
    return rows


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), 3) if vals else None


def fit(points: list[tuple[int, float]]) -> dict[str, float] | None:
    """Least squares stall = base + per_group * groups (pure)."""
    if len({g for g, _ in points}) < 2:
        return None
    base, slope = least_squares([float(g) for g, _ in points], [s for _, s in points])
    return {"base_s": round(base, 4), "per_group_s": round(slope, 5)}


def run_size(groups: int, kinds: list[str], n: int, gap_s: float, root: Path, python: str) -> dict[str, Any]:
    folder = root / f"g{groups}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "job.yaml").write_text(yaml.safe_dump(job(groups)))
    plan = schedule(groups, kinds, n, gap_s)
    (folder / "chaos.yaml").write_text(yaml.safe_dump({"seed": 0, "start_after_s": 0, "schedule": plan}))
    run_dir = folder / "run"
    argv = [python, "-m", "lamplighter", "local", str(folder / "job.yaml"), "--chaos", f"@{folder / 'chaos.yaml'}"]
    argv += ["--run-dir", str(run_dir), "--report", str(folder / "report"), "--no-live"]
    t_launch = time.time()
    with open(folder / "local.log", "wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            first = wait_first_commit(run_dir, groups, proc, 300.0)
            end = first + plan[-1]["at_s"] + TAIL_S
            while time.time() < end and proc.poll() is None:
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # local mode ends its groups and writes its report
            proc.wait(120)
    report = json.loads((folder / "report" / "report.json").read_text())
    rows = analyse(report, run_dir, groups)
    return {
        "groups": groups,
        "faults": rows,
        "start_s": round(first - t_launch, 1),
        "steps_lost": report.get("steps_lost"),
        "weights_identical": report.get("weights_identical"),
        "chaos_missed": report.get("chaos_missed"),
    }


def wait_first_commit(run_dir: Path, groups: int, proc: subprocess.Popen[bytes], timeout_s: float) -> float:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        ts = [r.t for g in range(groups) for r in read_steps(run_dir / "steps" / f"{g}.jsonl") if r.committed]
        if ts:
            return min(ts)
        if proc.poll() is not None:
            raise RuntimeError(f"lamplighter local exited {proc.returncode} before any commit ({run_dir})")
        time.sleep(0.5)
    raise RuntimeError(f"no commit within {timeout_s:.0f} s ({run_dir})")


def summarize(sizes: list[dict[str, Any]], kinds: list[str]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    fits: dict[str, Any] = {}
    for kind in kinds:
        points = []
        for s in sizes:
            rows = [r for r in s["faults"] if r["kind"] == kind]
            if not rows:
                continue
            cell = {
                "n": len(rows),
                "stall_max_s": spread([r["stall_max_s"] for r in rows]),
                "rejoin_stall_max_s": _spread([r["rejoin_stall_max_s"] for r in rows]),
            }
            for part in ("failed_step_s", "quorum_s", "pg_s", "step_s"):
                cell[part] = _spread([r["parts_of_worst"][part] for r in rows])
            table.setdefault(kind, {})[str(s["groups"])] = cell
            points += [(s["groups"], r["stall_max_s"]) for r in rows]
        fits[kind] = fit(points)
    return {"table": table, "fit": fits}


def _spread(values: list[float | None]) -> dict[str, Any] | None:
    vals = [v for v in values if v is not None]
    return spread(vals) if vals else None


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for kind, per in doc["table"].items():
        xs = sorted(int(g) for g in per)
        med = [per[str(g)]["stall_max_s"]["median"] for g in xs]
        lo = [m - per[str(g)]["stall_max_s"]["min"] for m, g in zip(med, xs, strict=True)]
        hi = [per[str(g)]["stall_max_s"]["max"] - m for m, g in zip(med, xs, strict=True)]
        axes[0].errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=kind)
    axes[0].axhline(1.0, color="k", linestyle=":", label="goal for a kill (1 s)")
    axes[0].set_xlabel("replica groups")
    axes[0].set_ylabel("survivors' stall at the fault, s (worst survivor)")
    axes[0].legend(fontsize=8)
    kill = doc["table"].get("kill", {})
    xs = sorted(int(g) for g in kill)
    bottom = [0.0] * len(xs)
    for part in ("failed_step_s", "quorum_s", "pg_s", "step_s"):
        vals = [(kill[str(g)].get(part) or {}).get("median", 0.0) for g in xs]
        axes[1].bar([str(g) for g in xs], vals, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    axes[1].set_xlabel("replica groups (kill)")
    axes[1].set_ylabel("fault -> survivor's next commit, s")
    axes[1].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("Survivors' stall against the number of groups (local mode)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.stall_groups", description=__doc__.split("\n")[0])
    ap.add_argument("--groups", default="3,6,12", help="group counts (default 3,6,12)")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds (default {','.join(KINDS)})")
    ap.add_argument("--n", type=int, default=3, help="faults of each kind per group count (default 3)")
    ap.add_argument("--gap-s", type=float, default=15.0, help="seconds between faults (default 15)")
    args = ap.parse_args(argv)
    kinds = args.kinds.split(",")
    root = BUILD / "stall-groups"
    sizes = []
    for groups in (int(g) for g in args.groups.split(",")):
        t = time.monotonic()
        sizes.append(run_size(groups, kinds, args.n, args.gap_s, root, sys.executable))
        worst = {k: [r["stall_max_s"] for r in sizes[-1]["faults"] if r["kind"] == k] for k in kinds}
        print(f"[stall] {groups} groups: {worst} ({time.monotonic() - t:.0f} s)", flush=True)
    doc = {
        "config": {"groups": args.groups, "kinds": kinds, "n": args.n, "gap_s": args.gap_s, "job": job(0)},
        "method": (__doc__ or "").strip(),
        **summarize(sizes, kinds),
        "sizes": sizes,
    }
    path = write_result("stall_groups", doc)
    plot(doc, RESULTS / "stall_groups.png")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
