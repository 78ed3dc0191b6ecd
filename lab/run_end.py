"""Ending a job that trains "until told": its stop-at step (rundir/stop_at.py), chosen from its own pace.

A lab run, a test or the soak sets trainer.steps far out and, once what it
came for has happened (every fault delivered and recovered), stops the job a
little ahead of where it is: far enough that every group reads the file (a
trainer looks once a second) before it gets there, near enough that nothing
trains on for nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from pathlib import Path

from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import StepRecord, read_steps
from lamplighter.rundir.stop_at import write_stop_at

PACE_WINDOW_S = 30.0  # the recent pace: committed steps over this last stretch


def stop_step(records: list[StepRecord], now: float, lead_s: float, min_lead_steps: int) -> int:
    """The step to stop at: `lead_s` ahead of the highest commit at the job's recent pace, and at least
    `min_lead_steps` ahead (a running group must read the file before it gets there)."""
    done = [r for r in records if r.committed]
    high = max((r.step for r in done), default=0)
    recent = [r for r in done if r.t >= now - PACE_WINDOW_S]
    span = max((r.t for r in recent), default=0.0) - min((r.t for r in recent), default=0.0)
    pace = (max(r.step for r in recent) - min(r.step for r in recent)) / span if span > 0 else 0.0
    return high + max(min_lead_steps, math.ceil(pace * lead_s))


def stop_run(run_dir: Path, groups: Iterable[int], lead_s: float = 3.0, min_lead_steps: int = 10) -> int:
    """Write the job's stop-at step (from every group's step log) and return it."""
    paths = RunPaths(Path(run_dir))
    end = stop_step([r for g in groups for r in read_steps(paths.steps(g))], time.time(), lead_s, min_lead_steps)
    write_stop_at(paths.root, end)
    return end
