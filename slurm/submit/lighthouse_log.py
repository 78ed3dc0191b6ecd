"""Why a Lighthouse job publishes no address: the error its log shows (`status`, and `submit --wait`).

The Lighthouse job's script starts the Lighthouse again whenever it exits, after a line
"lamplighter: the Lighthouse exited (N); starting it again" (slurm/submit/render.py). A Lighthouse that
cannot start (an interpreter without torchft or lamplighter on its node, a port in use) exits at
once each time; the line before that note is its own last word, e.g. `ImportError: torchft is not
installed in this environment`. Only the end of the log is read, and only as the job's user.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from lamplighter.rundir import contract

TAIL_BYTES = 64 * 1024
_EXITED = re.compile(r"^lamplighter: the Lighthouse exited \((\d+)\); starting it again$")


@dataclass(frozen=True)
class LighthouseLogProblem:
    log: Path
    error: str  # the Lighthouse's last line before it exited
    status: int
    exits: int  # in the part of the log read

    def __str__(self) -> str:
        return (
            f"the Lighthouse exits at once ({self.error}; exit {self.status}, {self.exits} time(s) in {self.log}): "
            "check slurm.helper_python on the Lighthouse's node (`lamplighter validate` names it)"
        )


def lighthouse_log(run_dir: Path, job_id: int) -> Path:
    return contract.RunPaths(Path(run_dir)).logs() / f"lighthouse-{job_id}.out"


def read_tail(path: Path, limit: int = TAIL_BYTES) -> str:
    """The last `limit` bytes of a regular file (never a FIFO or a link's target), or "" if unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o170000 != 0o100000:  # a regular file only
            return ""
        os.lseek(fd, max(0, st.st_size - limit), os.SEEK_SET)
        return os.read(fd, limit).decode("utf-8", errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def lighthouse_log_problem(run_dir: Path, job_id: int) -> LighthouseLogProblem | None:
    """The Lighthouse's last error before it last exited, if its job's log shows it exiting."""
    path = lighthouse_log(run_dir, job_id)
    lines = [line.rstrip() for line in read_tail(path).splitlines()]
    exits = [i for i, line in enumerate(lines) if _EXITED.match(line)]
    if not exits:
        return None
    last = exits[-1]
    before = [line.strip() for line in lines[:last] if line.strip() and not _EXITED.match(line)]
    m = _EXITED.match(lines[last])
    assert m is not None
    return LighthouseLogProblem(path, before[-1] if before else "no message", int(m.group(1)), len(exits))
