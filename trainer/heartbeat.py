"""The per-process heartbeat file the supervisor's hang check reads.

A file rather than a socket: it survives a supervisor restart, needs no
connection management in the trainer, and the supervisor can read it at its
own pace. Rewritten atomically after every step and once at start.
"""

from __future__ import annotations

from pathlib import Path

from lamplighter.trainer.contract import write_json_atomic


def write_heartbeat(path: Path, *, step: int, now: float, pid: int) -> None:
    """Record that this process finished `step` at `now` (epoch seconds)."""
    write_json_atomic(path, {"step": step, "time": now, "pid": pid})
