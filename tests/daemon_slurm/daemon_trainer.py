"""A stand-in trainer for the daemon tests: the contract's environment in, a step heartbeat out, no torch.

Writes heartbeat/<replica>.<rank>.json every 0.2 s and records each start
(attempt, node, pid) under <run_dir>/starts/, then runs until killed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from lamplighter.rundir.contract import ENV_ATTEMPT, ENV_REPLICA_ID, ENV_RUN_DIR, RunPaths, write_json_atomic


def main() -> None:
    run = Path(os.environ[ENV_RUN_DIR])
    rid = int(os.environ[ENV_REPLICA_ID])
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    attempt = int(os.environ.get(ENV_ATTEMPT, "0"))
    paths = RunPaths(run)
    write_json_atomic(
        run / "starts" / f"{rid}-{attempt}.json",
        {"pid": os.getpid(), "node": os.environ.get("SLURMD_NODENAME"), "attempt": attempt},
    )
    step = 0
    while True:
        step += 1
        beat = {"step": step, "time": time.time(), "pid": os.getpid(), "attempt": attempt}
        write_json_atomic(paths.heartbeat(rid, rank), beat)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
