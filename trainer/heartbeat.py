"""The heartbeat a trainer may write after each step: the finer progress signal.

lamplighter reads every torchft trainer's progress from the Lighthouse with no
help from the trainer. A trainer that also calls `beat(step)` after each
step gives the supervisor a per-rank signal that does not depend on the
quorum (e.g. DiLoCo-style training that forms a quorum only every N steps):

    from lamplighter.trainer.heartbeat import beat
    for ...:
        train_step()
        beat(manager.current_step())   # committed steps so far: 1 after the first

This module imports nothing but the standard library and the contract (no
torch). Outside lamplighter (no LAMPLIGHTER_RUN_DIR in the environment) a
beat does nothing, so a trainer can call it unconditionally.

A file rather than a socket: it survives a supervisor restart, needs no
connection management in the trainer, and the supervisor reads it at its own
pace. It is rewritten atomically, so a reader never sees half of it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from lamplighter.rundir.contract import ENV_ATTEMPT, ENV_REPLICA_ID, ENV_RUN_DIR, RunPaths, write_json_atomic


def write_heartbeat(path: Path, *, step: int, now: float, pid: int, attempt: int | None = None) -> None:
    """Record that this process has committed `step` steps at `now` (epoch seconds)."""
    obj: dict[str, float | int] = {"step": step, "time": now, "pid": pid}
    if attempt is not None:
        obj["attempt"] = attempt
    write_json_atomic(path, obj)


def heartbeat_path(env: Mapping[str, str]) -> Path | None:
    """Where this process's heartbeat goes, from the environment lamplighter gave it; None outside lamplighter."""
    run_dir, group = env.get(ENV_RUN_DIR), env.get(ENV_REPLICA_ID)
    if not run_dir or group is None or not group.isdigit():
        return None
    rank = env.get("RANK", "0")
    return RunPaths(Path(run_dir)).heartbeat(int(group), int(rank) if rank.isdigit() else 0)


def beat(step: int, *, env: Mapping[str, str] | None = None, now: float | None = None) -> bool:
    """Tell the supervisor this rank has committed `step` steps. Returns False when not run by lamplighter."""
    e = os.environ if env is None else env
    path = heartbeat_path(e)
    if path is None:
        return False
    attempt = e.get(ENV_ATTEMPT, "")
    write_heartbeat(
        path,
        step=int(step),
        now=time.time() if now is None else now,
        pid=os.getpid(),
        attempt=int(attempt) if attempt.isdigit() else None,
    )
    return True
