"""`<run_dir>/stop-at`: the job's owner tells a running job to stop at a step, without a restart.

The file holds one decimal step number (`echo 5000 > runs/<job>/stop-at`).
A trainer that honours it, as the reference trainer does, stops once it has
committed that step, or at once when it is already past it; a group that
starts later finds the job done. The job's target is then the smaller of
`trainer.steps` and the file's step (`final_target`), and the run reports
judge `reached_target` against that. A job that trains "until told" sets
`trainer.steps` far out and writes the file when it has what it wanted (the
soak does, once every fault has been delivered and watched).

The run directory is the job owner's: the file is the owner's instruction to
their own job. Readers take it only as a small regular file of the job's
owner (owned_file.py: a link, a FIFO, another user's file or anything long is
ignored, as is a file that does not hold a number), so a supervisor reading
it (the hang check's "finishing" step) cannot be made to block or follow a
link. Write it atomically (`write_stop_at`), or accept that
a reader may see it half-written once and keep the step it knew until its
next look. Removing the file gives the groups that still run their
trainer.steps back.
No torch here: the supervisors import it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.owned_file import OwnedFileError, read_owned

MAX_BYTES = 64  # a step number and a newline; anything longer is not one
READ_EVERY_S = 1.0  # a trainer looks at most this often: a stat and a read per second cost nothing


ABSENT = "absent"
UNUSABLE = "unusable"


def read_stop_file(run_dir: Path, owner: int | None = None) -> int | str:
    """The step the file names; ABSENT (no file) or UNUSABLE (not a small regular file of `owner`, default this
    process's user, holding a number)."""
    path = RunPaths(Path(run_dir)).stop_at()
    try:
        data = read_owned(path, owner=os.getuid() if owner is None else owner, max_bytes=MAX_BYTES)
    except OwnedFileError as e:
        return ABSENT if e.why == "no such file" else UNUSABLE
    text = data.decode("ascii", errors="replace").strip()
    if not text.isdigit():
        return UNUSABLE
    return int(text)


def read_stop_at(run_dir: Path, owner: int | None = None) -> int | None:
    """The step the file names, or None (no file, or none that can be used)."""
    got = read_stop_file(run_dir, owner)
    return got if isinstance(got, int) else None


def final_target(steps: int, stop_at: int | None) -> int:
    """The job's target: trainer.steps, or the owner's stop step when that is smaller."""
    return steps if stop_at is None else min(steps, stop_at)


def write_stop_at(run_dir: Path, step: int) -> Path:
    """Write the file atomically (a reader sees the old content or the new, never half)."""
    if step < 0:
        raise ValueError(f"stop-at: step {step} is negative")
    path = RunPaths(Path(run_dir)).stop_at()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{step}\n")
    os.replace(tmp, path)
    return path


class StopAt:
    """A trainer's view of its target: trainer.steps, lowered by the stop-at file, read at most every `every_s`."""

    def __init__(
        self, run_dir: Path, steps: int, clock: Callable[[], float] = time.monotonic, every_s: float = READ_EVERY_S
    ) -> None:
        self._run_dir, self._steps, self._clock, self._every = Path(run_dir), steps, clock, every_s
        self._read_at: float | None = None
        self._stop_at: int | None = None

    def target(self) -> int:
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._every:
            self._read_at = now
            got = read_stop_file(self._run_dir)
            if got != UNUSABLE:  # one being rewritten keeps the last step it named; one removed, none
                self._stop_at = got if isinstance(got, int) else None
        return final_target(self._steps, self._stop_at)
