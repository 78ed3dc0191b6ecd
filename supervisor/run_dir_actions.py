"""Each action about a job, appended to that job's run directory too: `<run_dir>/actions.jsonl`.

A daemon's own action log (`<state_dir>/actions.jsonl`) stays on its node. The
run directory is shared by design (every node of the job reads job.json from
it), so the lines of every node's daemon about one job meet there, and
`lamplighter why JOB` reads them from a login node. Each line is one
O_APPEND write of a whole line (well below PIPE_BUF-like limits that matter
for local file systems; NFS serializes appends per client): writers never
interleave within a line. A run directory that cannot be written is logged
once and skipped: the action itself never fails for it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

log = logging.getLogger(__name__)

ACTIONS_FILE = "actions.jsonl"


def append_line(path: Path, line: str) -> None:
    """Append one whole line in one write (created 0644: the job's user reads it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
    finally:
        os.close(fd)


class RunDirActions:
    """A sink for action lines that also go to the run directory of each job they concern."""

    def __init__(self, run_dir_of: Callable[[str], str | None]) -> None:
        self.run_dir_of = run_dir_of
        self._failed: set[str] = set()

    def __call__(self, line: str, job_ids: Iterable[str]) -> None:
        run_dirs = sorted({d for j in job_ids if (d := self.run_dir_of(j))})
        for run_dir in run_dirs:
            path = Path(run_dir) / ACTIONS_FILE
            try:
                append_line(path, line)
                self._failed.discard(run_dir)
            except OSError as e:
                if run_dir not in self._failed:
                    log.warning("cannot append the action to %s (kept in the node's own log): %s", path, e)
                    self._failed.add(run_dir)
