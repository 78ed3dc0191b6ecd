"""Fencing: a trainer whose group was started again elsewhere must not commit another step.

A node cut off from Slurm (its slurmd silent while its processes live) has its
job requeued and started on another node; the old trainers may keep running.
Two processes of one group in one timeline is split brain: each group's rank 0
claims `fence/<replica_id>.json` with its Slurm job id and attempt before it
builds its torchft Manager (so before it can join any quorum), and every rank
checks it before each commit: a newer attempt of the same Slurm job there
means this process is stale, and it leaves without committing. The node
daemon kills such trainers too (they may not be the reference trainer).

A newer claim wins: an older attempt never overwrites it. A new submission
(another Slurm job id) is not fenced by an old one's file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from lamplighter.rundir.contract import write_json_atomic


@dataclass(frozen=True)
class Claim:
    job_id: str  # the Slurm job id ("" in local mode, where a run directory holds one run)
    attempt: int


class Fenced(Exception):
    """A newer attempt of this group holds the fence: this process must not commit."""


def read_claim(path: Path) -> Claim | None:
    try:
        data = json.loads(path.read_text())
        return Claim(str(data["job_id"]), int(data["attempt"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none yet, or being replaced: the next check reads it


def newer(current: Claim | None, mine: Claim) -> bool:
    return current is not None and current.job_id == mine.job_id and current.attempt > mine.attempt


class Fence:
    """One process's view of its group's fence file; `check` is cheap when the file did not change."""

    def __init__(self, path: Path, mine: Claim) -> None:
        self.path, self.mine = path, mine
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) of the file last read

    def claim(self) -> None:
        """Rank 0, before the Manager: write this attempt's claim unless a newer one holds the fence."""
        current = read_claim(self.path)
        if newer(current, self.mine):
            raise Fenced(self._why(current))
        write_json_atomic(self.path, {"job_id": self.mine.job_id, "attempt": self.mine.attempt})

    def check(self) -> None:
        """Before each commit: raise Fenced if a newer attempt of this group claimed the fence."""
        try:
            st = os.stat(self.path)
        except OSError:
            return
        key = (st.st_mtime_ns, st.st_size)
        if key == self._seen:
            return
        self._seen = key
        current = read_claim(self.path)
        if newer(current, self.mine):
            raise Fenced(self._why(current))

    def _why(self, current: Claim | None) -> str:
        assert current is not None
        return (
            f"attempt {current.attempt} of this group (Slurm job {current.job_id or '-'}) was started after this "
            f"one (attempt {self.mine.attempt}): this process is stale and leaves without committing"
        )
