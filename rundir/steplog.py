"""The per-step JSON-lines log a replica group's rank 0 appends to.

One line per step, flushed and fsync'd so a reader (the supervisor, a test,
a benchmark) sees every step the trainer finished. A trainer killed mid-write
leaves a torn last line; `read_steps` skips it instead of failing.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path


@dataclass
class StepRecord:
    """What one replica group did in one step."""

    t: float  # epoch seconds when the step finished
    replica_id: int
    step: int  # the manager's step after this step
    committed: bool
    participants: int
    quorum_id: int
    # Who sent the weights this step: "peer:<replica_id>" for a live peer,
    # "checkpoint:<step>" for the fallback checkpoint, None when not healed.
    healed_from: str | None
    loss: float
    state_hash: str  # sha256 of model + optimizer + data cursor state
    attempt: int
    samples: int  # samples this group consumed in this step
    first_sample: int  # global index of this group's first sample this step
    # The trainer's own step count, when it differs from torchft's: torchtitan counts attempted steps (a
    # failed commit is a step to it, not to torchft) and ends at trainer.steps in its own counting.
    trainer_step: int | None = None


_FIELDS = tuple(f.name for f in fields(StepRecord))
_OPTIONAL = {"trainer_step"}


def append_step(path: Path, rec: StepRecord) -> None:
    """Append one record as one JSON line, flushed to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    obj = {k: v for k, v in asdict(rec).items() if not (k in _OPTIONAL and v is None)}
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    # O_APPEND: a single write() of one line never interleaves with another writer's.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        # A writer killed mid-line left no newline: end that torn line first so
        # this record is not glued onto it.
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def parse_step(line: str) -> StepRecord | None:
    """One record from one line, or None if the line is torn or not a record."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not set(_FIELDS) - _OPTIONAL <= set(obj) <= set(_FIELDS):
        return None
    return StepRecord(**obj)


def read_steps(path: Path) -> list[StepRecord]:
    """All complete records in the file; a torn line (a killed writer) is skipped. No file: []."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out: list[StepRecord] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        rec = parse_step(line)
        if rec is not None:
            out.append(rec)
    return out
