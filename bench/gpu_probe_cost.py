"""CPU cost of the GPU check: CPU seconds (parent + workers) per probe cycle of N simulated GPUs.

    .venv/bin/python bench/gpu_probe_cost.py [--gpus 8] [--cycles 200]

Prints per-cycle CPU seconds and the fraction of one core it takes at each probe pace: the poll
interval (a node running a lamplighter trainer) and the idle paces (`health.idle_probe_interval_s`,
a node with none, whose CPU is another tenant's).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import psutil

from lamplighter.configs.schema import HealthConfig, NodeDaemonHealthConfig
from lamplighter.gpusim.build import ensure_built, sim_env
from lamplighter.gpusim.state import StateDir
from lamplighter.supervisor.gpu.check import GpuCheck
from lamplighter.supervisor.gpu.worker import WorkerSpec

IDLE_PACES = (5.0, 10.0, 30.0, 60.0)


def cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        t = psutil.Process(pid).cpu_times()
        total += t.user + t.system
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=200)
    args = ap.parse_args()
    health = HealthConfig()
    root = ensure_built().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        sd = StateDir(Path(tmp))
        sd.init(args.gpus)
        check = GpuCheck(health, WorkerSpec(env=sim_env(root, sd.root)), expected_gpus=args.gpus, collect_s=10.0)
        now = 0.0
        for _ in range(3):  # start workers, take baselines
            now += health.poll_interval_s
            check.observe(now)
        pids = [psutil.Process().pid] + [g.worker.pid for g in check.gpus.values() if g.worker.pid]
        before = cpu_s(pids)
        for _ in range(args.cycles):
            now += health.poll_interval_s
            obs = check.observe(now)
            assert all(o.status == "ok" for o in obs), [o.reason for o in obs if o.status != "ok"]
        per_cycle = (cpu_s(pids) - before) / args.cycles
        rss_mb = sum(psutil.Process(p).memory_info().rss for p in pids[1:]) / 2**20
        check.close()
    print(
        json.dumps(
            {
                "gpus": args.gpus,
                "cycles": args.cycles,
                "cpu_s_per_cycle": round(per_cycle, 6),
                "core_fraction_at_poll_interval": round(per_cycle / health.poll_interval_s, 5),
                # The probe's cost is per probe: at a slower pace, the same probe over a longer interval.
                "idle_probe_interval_s_default": NodeDaemonHealthConfig().idle_probe_interval_s,
                "core_fraction_by_interval_s": {
                    f"{pace:g}": round(per_cycle / pace, 6) for pace in (health.poll_interval_s, *IDLE_PACES)
                },
                "workers_rss_mb": round(rss_mb, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
