"""A replica group's progress: when it last advanced, read from heartbeat files or the Lighthouse.

A source answers one question per group attempt: when did this attempt last
make progress, and at which step (None: no progress since it started). The
hang check (hang.py) turns the answer into a verdict. Sources are given what
they read (a run directory, a status fetcher) and the time is passed in.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lamplighter.rundir.contract import SMALL_FILE_BYTES, RunPaths
from lamplighter.rundir.owned_file import OwnedFileError, read_owned


@dataclass(frozen=True)
class Progress:
    t: float  # epoch seconds when the attempt last advanced
    step: int | None  # the step it reached then, when the source knows it
    source: str  # "heartbeat" or "lighthouse"


class ProgressSource(Protocol):
    name: str

    def refresh(self, now: float) -> None:
        """Read what the source reads (once per check cycle)."""
        ...

    def last_progress(self, group: int, attempt: int, started_at: float) -> Progress | None:
        """The attempt's latest progress, or None if it has made none since `started_at`."""
        ...

    def excused_until(self, now: float) -> float:
        """Silence before this time does not count (the source could not see): 0 when it always could."""
        ...

    def job_progress(self) -> tuple[set[int], float | None]:
        """Every group of the job this source saw advance (not only this node's), and when any last did."""
        ...


@dataclass(frozen=True)
class Beat:
    step: int
    time: float
    pid: int
    attempt: int | None  # absent when the trainer was started without LAMPLIGHTER_ATTEMPT (by hand)


def read_beat(path: Path, owner: int | None = None) -> Beat | None:
    """A heartbeat file, a small regular file of `owner` (default: this process's user), or None."""
    try:
        obj = json.loads(read_owned(path, owner=os.getuid() if owner is None else owner, max_bytes=SMALL_FILE_BYTES))
        attempt = obj.get("attempt")
        return Beat(
            step=int(obj["step"]),
            time=float(obj["time"]),
            pid=int(obj["pid"]),
            attempt=None if attempt is None else int(attempt),
        )
    except (OwnedFileError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


class HeartbeatFiles:
    """Progress from the heartbeat files (trainer/heartbeat.py) under a run directory.

    Every rank that beats writes `heartbeat/<group>.<rank>.json`; the supervisor
    need not know how many ranks there are (torchrun starts them). A beat
    belongs to the attempt it names, or, without one, to the attempt running
    when it was written. A beat counts as progress when its step is above 0
    (a trainer beats step 0 while it starts). The group's progress is its
    slowest beating rank's: the group advances only when every rank does.
    """

    name = "heartbeat"

    def __init__(self, run_dir: Path, owner: int | None = None) -> None:
        self._paths = RunPaths(Path(run_dir))
        self._owner = owner  # whose heartbeat files count (the job's user; default: this process's)

    def refresh(self, now: float) -> None:
        return None  # files are read when asked

    def excused_until(self, now: float) -> float:
        return 0.0

    def job_progress(self) -> tuple[set[int], float | None]:
        return set(), None  # read per group when asked; the groups the hang check holds stand for the job

    def beats(self, group: int) -> dict[int, Beat]:
        out: dict[int, Beat] = {}
        for path in self._paths.heartbeat(group, 0).parent.glob(f"{group}.*.json"):
            rank = path.name[len(f"{group}.") : -len(".json")]
            if rank.isdigit():
                beat = read_beat(path, self._owner)
                if beat is not None:
                    out[int(rank)] = beat
        return out

    def last_progress(self, group: int, attempt: int, started_at: float) -> Progress | None:
        mine = [
            b
            for b in self.beats(group).values()
            if (b.attempt == attempt if b.attempt is not None else b.time >= started_at) and b.step > 0
        ]
        if not mine:
            return None
        slowest = min(mine, key=lambda b: b.time)
        return Progress(t=slowest.time, step=slowest.step, source=self.name)
