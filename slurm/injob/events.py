"""The in-job agent's own record: `<run_dir>/injob/g<N>.jsonl`, one JSON line per thing it did.

Events: "started" (a trainer step, `how` warm or cold, its `attempt` and Slurm `step`), "spare" (a spare
step started, or `died`), "ended" (the trainer step's status and the decision on it). Written by the agent
as the job's user; read by the run reports and by chaos to tell when a restart inside the allocation
happened (Slurm sees none: the job stays RUNNING, its restart count unchanged).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lamplighter.rundir.contract import json_records

INJOB_DIR = "injob"


def journal_path(run_dir: Path, group: int) -> Path:
    return Path(run_dir) / INJOB_DIR / f"g{group}.jsonl"


def append_event(path: Path, event: str, t: float, **fields: Any) -> dict[str, Any]:
    """One whole line in one O_APPEND write; a link in its place is refused (O_NOFOLLOW)."""
    rec = {"t": t, "event": event, **fields}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (json.dumps(rec, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)
    return rec


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every record (a torn last line of a killed agent is skipped)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return json_records(text)
