"""The Prolog's cost per job start: `lamplighter healthcheck --prolog` on 8 simulated healthy GPUs, timed whole.

    .venv/bin/python -m bench.prolog_cost [--runs 40] [--gpus 8]

Slurm runs the Prolog before every job on every node it allocates, whoever owns the job, so this is
lamplighter's toll on each tenant's start. Each run is a fresh process, as slurmd starts it: Python's
start-up and imports, one probe worker per GPU, then the check. Writes bench/results/prolog_cost.json
(median and p99 of the wall time, and of the check itself as the command prints it) and a histogram.
On a real node, time the installed wrapper the same way: `time /usr/local/sbin/lamplighter-prolog`
(with SLURMD_NODENAME set); the amdsmi calls of real GPUs add their own time, which --deadline bounds.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.plots import _plt
from bench.results_io import RESULTS, write_result
from lamplighter.gpusim.build import ensure_built
from lamplighter.gpusim.state import StateDir

CHECK_S = re.compile(r"\(([0-9.]+) s\)\s*$")


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]


def one_start(tmp: Path, gpus: int) -> tuple[float, float | None]:
    """One Prolog run: its wall time, and the check's own time from its last line."""
    argv = [sys.executable, "-m", "lamplighter", "healthcheck", "--prolog", "--config", str(tmp / "node.yaml")]
    argv += ["--gpusim-root", str(tmp / "gpus"), "--node", "n1", "--gpus", str(gpus)]
    argv += ["--set", f"state_dir={tmp / 'state'}"]
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"the Prolog failed (exit {done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    m = CHECK_S.search((done.stdout + done.stderr).strip())
    return wall, float(m.group(1)) if m else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=40, help="job starts to time (default 40)")
    ap.add_argument("--gpus", type=int, default=8, help="simulated GPUs on the node (default 8)")
    args = ap.parse_args()
    if args.runs < 2:
        ap.error("--runs must be at least 2 (a p99 of one run is no p99)")
    ensure_built()
    walls: list[float] = []
    checks: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        StateDir(tmp / "gpus" / "n1").init(args.gpus)
        (tmp / "node.yaml").write_text("max_drain_fraction: 0.5\n")
        for i in range(args.runs):
            wall, check = one_start(tmp, args.gpus)
            walls.append(wall)
            if check is not None:
                checks.append(check)
            print(f"\r{i + 1}/{args.runs} job starts timed", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    data = {
        "gpus": args.gpus,
        "runs": args.runs,
        "wall_s": {"median": round(statistics.median(walls), 4), "p99": round(p99(walls), 4), "max": max(walls)},
        "check_s": {"median": round(statistics.median(checks), 4), "p99": round(p99(checks), 4)} if checks else None,
        "samples_wall_s": [round(w, 4) for w in walls],
    }
    path = write_result("prolog_cost", data)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.hist(walls, bins=20, color="#4c72b0")
    ax.axvline(data["wall_s"]["median"], color="k", linestyle="--", label="median")
    ax.axvline(data["wall_s"]["p99"], color="r", linestyle=":", label="p99")
    ax.set_xlabel("Prolog wall time per job start (s)")
    ax.set_ylabel("job starts")
    ax.set_title(f"lamplighter healthcheck --prolog, {args.gpus} simulated GPUs, {args.runs} starts", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "prolog_cost.png", dpi=110)
    plt.close(fig)
    print(f"median {data['wall_s']['median']:.3f} s, p99 {data['wall_s']['p99']:.3f} s per job start -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
