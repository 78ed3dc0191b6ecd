"""What one benchmark run leaves behind, the same for every strategy: step logs, faults, process starts.

Every strategy writes the reference trainer's step logs (steps/<index>.jsonl,
StepRecord), one file per replica (a torchft group, or a DDP rank), so the
numbers of bench.metrics come from the same code for all of them.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lamplighter.rundir.steplog import StepRecord, parse_step


@dataclass
class Fault:
    kind: str
    index: int | None  # replica hit (None: the Lighthouse)
    t_injected: float  # when it was delivered (struck or absorbed)
    t_detected: float | None = None  # the strategy noticed (None: never)
    t_restarted: float | None = None  # the failed replica's process runs again (None: never)
    t_scheduled: float | None = None  # the schedule's time, seconds after the run's first commit
    outcome: str = "struck"  # bench.delivery: struck, or absorbed (nothing there to hit)
    why: str = ""
    pid: int | None = None  # the process it struck
    released_at: float | None = None  # a per-fault run's cap: the harness ended the still-stuck process then


@dataclass
class RunRecord:
    strategy: str
    mtbf_s: float | None  # the schedule's per-group MTBF; None: fault-free
    rep: int
    seed: int
    window_s: float  # training time counted, from the first commit (no step target)
    replicas: int
    t_start: float  # the strategy was asked to start
    t_end: float
    reached: bool  # the run lasted its whole window
    substrate: str  # "slurm"
    faults: list[Fault] = field(default_factory=list)
    starts: dict[int, list[float]] = field(default_factory=dict)  # replica -> times its processes started
    steps: dict[int, list[StepRecord]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The record without the step logs (they stay in the run folder)."""
        d = asdict(self)
        d.pop("steps")
        return d


class StepFollower:
    """Reads the new complete lines of each replica's step log on every poll (a cheap tail -f)."""

    def __init__(self, run_dir: Path, replicas: int) -> None:
        self.paths = [run_dir / "steps" / f"{i}.jsonl" for i in range(replicas)]
        self.offsets = [0] * replicas
        self.records: dict[int, list[StepRecord]] = {i: [] for i in range(replicas)}

    def poll(self) -> None:
        for i, path in enumerate(self.paths):
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets[i])
                    data = f.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n")
            if end < 0:
                continue
            self.offsets[i] += end + 1
            for line in data[: end + 1].decode(errors="replace").splitlines():
                rec = parse_step(line) if line.strip() else None
                if rec is not None:
                    self.records[i].append(rec)

    def first_commit(self) -> float | None:
        ts = [r.t for recs in self.records.values() for r in recs if r.committed]
        return min(ts) if ts else None

    def last_commit(self, index: int) -> float | None:
        recs = [r for r in self.records[index] if r.committed]
        return recs[-1].t if recs else None

    def max_step(self) -> int:
        return max((r.step for recs in self.records.values() for r in recs if r.committed), default=0)


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
