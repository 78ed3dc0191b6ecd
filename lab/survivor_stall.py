"""Survivors' stall when all groups but one die at the same instant, with and without a rendezvous bound (#16).

`lamplighter local`, a real Lighthouse (heartbeat timeout 500 ms), pg_timeout_s
2; every 15 s, all groups but group 0 are killed together (9 rounds). Two
sizes: 3 groups (2 die at once) and 4 groups (3 die at once). Per size, two
arms: `pg-timeout`, the process group's setup after a quorum bounded by
pg_timeout_s (torchft's one timeout, torchft.rendezvous_timeout_ms null); and
`adaptive`, the default bound that learns from the group's own setups
(trainer/rendezvous_bound.py). Per arm: each round's survivor's stall (the
report's survivor_stall_s of group 0), steps lost, identical weights, and the
survivor's uncommitted steps. One JSON file.

    python -m lamplighter.lab.survivor_stall [--out build/survivor-stall] [--rounds 9]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from lamplighter.commands.local import add_parser, run_local
from lamplighter.lab.source_stamp import source_stamp
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import read_steps
from lamplighter.trainer.quick_rendezvous import SETUP_FAILED

ARMS: dict[str, tuple[int, int | str | None]] = {
    "3-groups-pg-timeout": (3, None),
    "3-groups-adaptive": (3, "adaptive"),
    "4-groups-pg-timeout": (4, None),
    "4-groups-adaptive": (4, "adaptive"),
}
JOB = """
name: stall
trainer:
  steps: {steps}
  model: {{dim: 64, layers: 2, heads: 4, seq_len: 32, batch_size: 16}}
  checkpoint: {{enabled: false}}
groups: {{count: {groups}}}
lighthouse: {{port: 0, min_replicas: 1, quorum_tick_ms: 20, join_timeout_ms: 1000, heartbeat_timeout_ms: 500}}
torchft: {{pg_timeout_s: 2, timeout_s: 3, quorum_timeout_s: 4, connect_timeout_s: 10, rendezvous_timeout_ms: {rendezvous}}}
health: {{hang_timeout_s: 5, poll_interval_s: 0.5}}
restart: {{budget_per_group: 100, backoff_initial_s: 0, crash_loop_max: 100}}
"""


def run_arm(folder: Path, groups: int, rendezvous: int | str | None, rounds: int) -> dict[str, Any]:
    shutil.rmtree(folder, ignore_errors=True)  # this tool's own output: never read a report of an earlier run
    folder.mkdir(parents=True)
    setting = "null" if rendezvous is None else rendezvous
    # Enough steps to outlast the schedule (about 25 steps/s here between faults).
    (folder / "job.yaml").write_text(JOB.format(steps=25 * (15 * rounds + 10), groups=groups, rendezvous=setting))
    schedule = "".join(
        f"- {{at_s: {t}, kind: kill, group: {g}}}\n" for t in range(5, 5 + 15 * rounds, 15) for g in range(1, groups)
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
        "groups": groups,
        "killed_at_once": groups - 1,
        "rendezvous_timeout_ms": rendezvous,
        "exit": rc,
        "rounds": len(stalls),
        "survivor_stall_s": stalls,
        "median_s": statistics.median(stalls) if stalls else None,
        "max_s": max(stalls) if stalls else None,
        "rounds_at_1s_or_more": sum(1 for s in stalls if s >= 1.0),
        "setups_timed_out": setups_timed_out(folder / "run"),
        "steps_lost": report["steps_lost"],
        "weights_identical": report["weights_identical"],
        "survivor_uncommitted_steps": sum(1 for r in survivor if not r.committed),
        "wall_s": report["wall_s"],
    }


def setups_timed_out(run_dir: Path) -> int:
    """Process-group setups that hit their bound, as the trainers logged them (trainer/quick_rendezvous.py)."""
    return sum(log.read_text(errors="replace").count(SETUP_FAILED) for log in run_dir.rglob("*.log"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lamplighter.lab.survivor_stall",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", type=Path, default=Path("build/survivor-stall"), help="folder (result.json there)")
    ap.add_argument("--rounds", type=int, default=9, help="rounds of simultaneous kills per arm")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        print("survivor_stall: --rounds must be at least 1", file=sys.stderr)
        return 2
    source = source_stamp()  # at the start: the code that ran, whatever happens to the tree meanwhile
    arms = {}
    for name, (groups, rendezvous) in ARMS.items():
        print(f"arm {name} ...", flush=True)
        arms[name] = run_arm(args.out / name, groups, rendezvous, args.rounds)
        print(json.dumps({name: {k: v for k, v in arms[name].items() if k != "survivor_stall_s"}}), flush=True)
    (args.out / "result.json").write_text(json.dumps({"source": source, "arms": arms}, indent=2) + "\n")
    print(f"result: {args.out / 'result.json'}")
    ok = all(a["exit"] == 0 and a["steps_lost"] == 0 and a["weights_identical"] for a in arms.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
