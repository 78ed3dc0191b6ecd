"""What a node daemon's /proc reads cost, against the number of processes on its machine (#31).

Every node of make scale's Slurm lab shares this machine's /proc, so each node daemon scans every node's
processes: at 64 nodes about 600 of them, where a cluster node holds its own. This measures the two reads
that grow with it, as the compute loop does them: the trainer scan every cycle (supervisor/node/trainers.py;
a full one every FULL_RESCAN_EVERY cycles) and the /proc snapshot every slow cycle (for D-state and memory).
`--extra` sleeping processes are started for each point and ended after it. Cores are the CPU a daemon
would spend on these reads at a cycle every 0.5 s.

    python -m bench.proc_scan_cost [--extra 0,300,600] [--out bench/results/proc_scan_cost.json]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.plots import _plt
from bench.results_io import RESULTS, write_result
from lamplighter.supervisor.node.loop import ComputeLoop
from lamplighter.supervisor.node.trainers import FULL_RESCAN_EVERY, TrainerScanner
from lamplighter.system.procfs import PROC, pids, snapshot

CYCLE_S = 0.5
SLOW_EVERY: int = ComputeLoop.slow_every  # the compute loop's default


def measure(extra: int, cycles: int = 3 * FULL_RESCAN_EVERY) -> dict[str, Any]:
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(extra)]
    try:
        scanner = TrainerScanner(PROC, "n1")
        full: list[float] = []
        quick: list[float] = []
        for i in range(cycles):
            t = time.perf_counter()
            scanner.scan()
            (full if i % FULL_RESCAN_EVERY == 0 else quick).append(time.perf_counter() - t)
        snaps = []
        for _ in range(5):
            t = time.perf_counter()
            snapshot(PROC)
            snaps.append(time.perf_counter() - t)
        scan_s = (statistics.median(quick) * (FULL_RESCAN_EVERY - 1) + statistics.median(full)) / FULL_RESCAN_EVERY
        per_cycle_s = scan_s + statistics.median(snaps) / SLOW_EVERY
        return {
            "processes": len(pids(PROC)),
            "scan_ms": round(statistics.median(quick) * 1e3, 3),
            "full_scan_ms": round(statistics.median(full) * 1e3, 2),
            "snapshot_ms": round(statistics.median(snaps) * 1e3, 2),
            "daemon_cores": round(per_cycle_s / CYCLE_S, 4),
        }
    finally:
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--extra", default="0,300,600", help="sleeping processes added for each point")
    ap.add_argument("--out", type=Path, default=RESULTS / "proc_scan_cost.json")
    args = ap.parse_args(argv)
    rows = []
    for extra in (int(x) for x in args.extra.split(",")):
        row = measure(extra)
        rows.append(row)
        print(
            f"{row['processes']:4d} processes: scan {row['scan_ms']:.2f} ms (full {row['full_scan_ms']:.1f} ms), "
            f"snapshot {row['snapshot_ms']:.1f} ms: {row['daemon_cores']:.4f} cores a daemon",
            flush=True,
        )
    path = write_result(args.out.stem, {"cycle_s": CYCLE_S, "slow_every": SLOW_EVERY, "rows": rows})
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([r["processes"] for r in rows], [r["daemon_cores"] for r in rows], "o-")
    ax.set_xlabel("processes on the machine")
    ax.set_ylabel("a node daemon's /proc reads, cores")
    ax.set_title("/proc reads against the machine's processes")
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
