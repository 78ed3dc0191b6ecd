"""Survivors' stall when two of three groups die at the same instant, with and without a rendezvous bound (#16).

`lamplighter local`, 3 groups, a real Lighthouse (heartbeat timeout 500 ms),
pg_timeout_s 2; groups 1 and 2 are killed together every 15 s (9 pairs).
Arm `pg-timeout`: the process group's setup after a quorum is bounded by
pg_timeout_s (torchft's one timeout); arm `rendezvous-300ms`: by
torchft.rendezvous_timeout_ms 300 (trainer/quick_rendezvous.py). Per arm: each
pair's survivors' stall (the report's survivor_stall_s of group 0), steps
lost, identical weights, and the survivor's uncommitted steps. One JSON file.

    python -m lamplighter.lab.survivor_stall [--out build/survivor-stall] [--pairs 9]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from lamplighter.lab.demo_bare import source_stamp
from lamplighter.supervisor.local_cli import add_parser, run_local
from lamplighter.trainer.contract import RunPaths
from lamplighter.trainer.steplog import read_steps

ARMS = {"pg-timeout": None, "rendezvous-300ms": 300}
JOB = """
name: stall
trainer:
  steps: {steps}
  model: {{dim: 64, layers: 2, heads: 4, seq_len: 32, batch_size: 16}}
  checkpoint: {{enabled: false}}
groups: {{count: 3}}
lighthouse: {{port: 0, min_replicas: 1, quorum_tick_ms: 20, join_timeout_ms: 1000, heartbeat_timeout_ms: 500}}
torchft: {{pg_timeout_s: 2, timeout_s: 3, quorum_timeout_s: 4, connect_timeout_s: 10{rendezvous}}}
health: {{hang_timeout_s: 5, poll_interval_s: 0.5}}
restart: {{budget_per_group: 100, backoff_initial_s: 0, crash_loop_max: 100}}
"""


def run_arm(folder: Path, rendezvous_ms: int | None, pairs: int) -> dict[str, Any]:
    shutil.rmtree(folder, ignore_errors=True)  # this tool's own output: never read a report of an earlier run
    folder.mkdir(parents=True)
    extra = "" if rendezvous_ms is None else f", rendezvous_timeout_ms: {rendezvous_ms}"
    # Enough steps to outlast the schedule (about 25 steps/s here between faults).
    (folder / "job.yaml").write_text(JOB.format(steps=25 * (15 * pairs + 10), rendezvous=extra))
    schedule = "".join(
        f"- {{at_s: {t}, kind: kill, group: 1}}\n- {{at_s: {t}, kind: kill, group: 2}}\n"
        for t in range(5, 5 + 15 * pairs, 15)
    )
    (folder / "chaos.yaml").write_text(schedule)
    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers())
    args = ap.parse_args(
        ["local", str(folder / "job.yaml"), "--chaos", f"@{folder / 'chaos.yaml'}", "--run-dir", str(folder / "run")]
        + ["--report", str(folder / "report"), "--no-live"]
    )
    rc = run_local(args)
    report = json.loads((folder / "report" / "report.json").read_text())
    stalls = [f["survivor_stall_s"] for f in report["faults"] if f["group"] == 1 and f["survivor_stall_s"] is not None]
    survivor = read_steps(RunPaths(folder / "run").steps(0))
    return {
        "rendezvous_timeout_ms": rendezvous_ms,
        "exit": rc,
        "pairs": len(stalls),
        "survivor_stall_s": stalls,
        "median_s": statistics.median(stalls) if stalls else None,
        "max_s": max(stalls) if stalls else None,
        "steps_lost": report["steps_lost"],
        "weights_identical": report["weights_identical"],
        "survivor_uncommitted_steps": sum(1 for r in survivor if not r.committed),
        "wall_s": report["wall_s"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lamplighter.lab.survivor_stall",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", type=Path, default=Path("build/survivor-stall"), help="folder (result.json there)")
    ap.add_argument("--pairs", type=int, default=9, help="simultaneous double kills per arm")
    args = ap.parse_args(argv)
    if args.pairs < 1:
        print("survivor_stall: --pairs must be at least 1", file=sys.stderr)
        return 2
    arms = {}
    for name, ms in ARMS.items():
        print(f"arm {name} ...", flush=True)
        arms[name] = run_arm(args.out / name, ms, args.pairs)
        print(json.dumps({name: {k: v for k, v in arms[name].items() if k != "survivor_stall_s"}}), flush=True)
    (args.out / "result.json").write_text(json.dumps({"source": source_stamp(), "arms": arms}, indent=2) + "\n")
    print(f"result: {args.out / 'result.json'}")
    ok = all(a["exit"] == 0 and a["steps_lost"] == 0 and a["weights_identical"] for a in arms.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
