"""Restart to first commit with and without warm standbys, in one run: `python -m bench.warm_restart`.

The embedded demo job (configs/demo.yaml, 3 groups, the reference trainer) runs
under `lamplighter local` with the same schedule of kills in both arms: cold
(`restart.standby: 0`, each restart imports torch anew) and warm
(`restart.standby: 1`). Arms alternate and their order rotates per repetition,
so drift in the shared machine's load hits both. Per fault it keeps: restart
to the group's first commit, injection to that commit, and the survivors'
stall; per arm, the median and range over all faults; and the warm/cold ratio
of medians per repetition. Writes bench/results/warm_restart.json and .png.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.jobspec import BUILD, REPO
from bench.results_io import RESULTS, spread, write_result

ARMS = {"cold": 0, "warm": 1}
METRICS = ("first_commit_after_restart_s", "recovery_s", "survivor_stall_s")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def schedule(kills: int, gap_s: float, groups: int) -> str:
    """Kills `gap_s` apart from `gap_s` after the first commit, rotating over the groups: one group at a time,
    so each restart heals from a live peer, and a standby (refilled once every group commits) has had the
    time to import (about 3 s here) — in a real job, faults are hours apart."""
    lines = [f"- {{at_s: {(i + 1) * gap_s:g}, kind: kill, group: {(i + 1) % groups}}}" for i in range(kills)]
    return "\n".join(lines) + "\n"


def run_arm(out: Path, arm: str, chaos: Path, steps: int) -> dict[str, Any]:
    run_dir = out / arm
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [
        str(Path(sys.executable).parent / "lamplighter"),
        "local",
        str(REPO / "configs" / "demo.yaml"),
        "--no-live",
        "--steps",
        str(steps),
        "--chaos",
        f"@{chaos}",
        "--set",
        f"restart.standby={ARMS[arm]}",
        "--run-dir",
        str(run_dir),
    ]
    t = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    report_path = run_dir / "report" / "report.json"
    if proc.returncode != 0 or not report_path.exists():
        raise RuntimeError(
            f"{arm}: `{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    report = json.loads(report_path.read_text())
    faults = [f for f in report["faults"] if f["kind"] == "kill"]
    warm = [bool(f.get("warm")) for f in faults]
    if warm != [arm == "warm"] * len(faults):
        raise RuntimeError(f"{arm}: restarts were warm={warm}; see {run_dir}/logs (standby logs, group logs)")
    return {
        "arm": arm,
        "wall_s": round(time.monotonic() - t, 1),
        "steps_lost": report["steps_lost"],
        "weights_identical": report["weights_identical"],
        "reached_target": report["reached_target"],
        "standby": report.get("standby"),
        "faults": [{k: f.get(k) for k in ("group", "attempt", "warm", *METRICS)} for f in faults],
        "run_dir": str(run_dir),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    per_arm: dict[str, Any] = {}
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        per_arm[arm] = {m: spread([f[m] for r in mine for f in r["faults"] if f[m] is not None]) for m in METRICS}
    ratios = []
    for rep in sorted({r["rep"] for r in runs}):
        by = {r["arm"]: r for r in runs if r["rep"] == rep}
        med = {a: statistics.median(f["first_commit_after_restart_s"] for f in by[a]["faults"]) for a in ARMS}
        ratios.append(med["warm"] / med["cold"])
    return {
        "per_arm": per_arm,
        "warm_over_cold_first_commit": spread(ratios),
        "all_lost_zero": all(r["steps_lost"] == 0 for r in runs),
        "all_identical": all(r["weights_identical"] is True for r in runs),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for i, arm in enumerate(ARMS):
        ys = [f["first_commit_after_restart_s"] for r in result["runs"] if r["arm"] == arm for f in r["faults"]]
        ax.scatter([i + (j % 7 - 3) * 0.03 for j in range(len(ys))], ys, s=14, label=arm)
        ax.hlines(statistics.median(ys), i - 0.25, i + 0.25, color="black")
    ax.set_xticks(range(len(ARMS)), [f"{a} (standby {n})" for a, n in ARMS.items()])
    ax.set_ylabel("restart to first commit (s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"lamplighter local, demo job: {result['config']['kills']} kills x {result['config']['reps']} reps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.warm_restart",
        description="Restart to first commit, cold against warm standbys, on the demo job in local mode "
        "(both arms in one run; writes bench/results/warm_restart.json and .png).",
    )
    ap.add_argument("--reps", type=int, default=3, help="repetitions; each runs both arms (default 3)")
    ap.add_argument("--kills", type=int, default=4, help="kills per run (default 4)")
    ap.add_argument("--gap", type=float, default=10.0, help="seconds between kills (default 10)")
    ap.add_argument("--steps", type=int, default=600, help="target steps per run, outlasting the kills (default 600)")
    ap.add_argument("--out", type=Path, default=BUILD / "warm-restart", help="run directories (default build/)")
    args = ap.parse_args(argv)
    if args.reps < 1 or args.kills < 1 or args.gap <= 0:
        ap.error("--reps and --kills must be at least 1, --gap above 0")
    args.out.mkdir(parents=True, exist_ok=True)
    chaos = args.out / "kills.yaml"
    chaos.write_text(schedule(args.kills, args.gap, 3))
    runs = []
    for rep in range(args.reps):
        order = list(ARMS) if rep % 2 == 0 else list(reversed(ARMS))
        for arm in order:
            log(f"[warm-restart] rep {rep + 1}/{args.reps}: {arm} ...")
            r = run_arm(args.out / f"rep{rep}", arm, chaos, args.steps)
            r["rep"] = rep
            firsts = [f["first_commit_after_restart_s"] for f in r["faults"]]
            log(f"[warm-restart]   restart to first commit {firsts} s, lost {r['steps_lost']}, {r['wall_s']} s")
            runs.append(r)
    result = {
        "config": {"reps": args.reps, "kills": args.kills, "gap_s": args.gap, "steps": args.steps, "job": "demo"},
        **summarize(runs),
        "runs": runs,
    }
    path = write_result("warm_restart", result)
    try:
        plot(result, RESULTS / "warm_restart.png")
    except ImportError as e:
        log(f"[warm-restart] no plot: {e}")
    s = result["per_arm"]
    log(
        f"[warm-restart] first commit after restart: cold {s['cold']['first_commit_after_restart_s']}, "
        f"warm {s['warm']['first_commit_after_restart_s']}; ratio {result['warm_over_cold_first_commit']}; {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
