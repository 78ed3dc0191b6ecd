"""Whether the job already has progress, and what a starting group must do about it.

torchft lets a group with no live peer train from fresh weights. A trainer
must never do that once the job has committed steps: it heals from a live
peer, loads the durable fallback checkpoint, or refuses to run.

Each group's rank 0 records its last committed step in progress/<id>.json;
the job's progress is the largest of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from lamplighter.rundir.contract import write_json_atomic


def read_job_progress(progress_dir: Path) -> int:
    """The highest committed step any group recorded (0: the job never committed a step)."""
    best = 0
    if not progress_dir.is_dir():
        return 0
    for p in progress_dir.glob("*.json"):
        try:
            step = json.loads(p.read_text())["step"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a file being replaced or hand-edited: the others still count
        if isinstance(step, int) and step > best:
            best = step
    return best


def write_progress(path: Path, step: int) -> None:
    write_json_atomic(path, {"step": step})


class StartAction(Enum):
    TRAIN = "train"  # train on: from scratch (new job) or from healed weights
    WAIT = "wait"  # skip this step and ask for another quorum: a live peer may still join
    RESTART = "restart"  # give up this process (a retryable exit): its heals keep failing
    LOAD_CHECKPOINT = "load_checkpoint"
    REFUSE = "refuse"


@dataclass(frozen=True)
class StartDecision:
    action: StartAction
    reason: str


def decide_start(
    *,
    now: float,
    deadline: float,
    job_progress: int,
    manager_step: int,
    participants: int,
    num_groups: int,
    checkpoint_step: int | None,
    heal_error: str | None = None,
) -> StartDecision:
    """What a group that has not yet committed a step in this process does after a quorum.

    `manager_step` is the group's step after the quorum (and any heal): above 0
    means a peer with progress gave us its state. When every group is in the
    quorum at step 0, no live peer has progress and waiting cannot help.
    `heal_error`: the quorum asked for a heal and it failed (the peer sending
    the state died mid-transfer): the step is still 0, but peers with progress
    exist, so this is never "every group at step 0" (found by kill-healer).
    """
    if heal_error is not None:
        if now < deadline:
            return StartDecision(
                StartAction.WAIT, f"the heal failed ({heal_error}); asking for another quorum to heal from a live peer"
            )
        return StartDecision(StartAction.RESTART, f"every heal failed until the deadline; last: {heal_error}")
    if manager_step > 0:
        return StartDecision(StartAction.TRAIN, f"state at step {manager_step} received from a live peer")
    if job_progress == 0:
        return StartDecision(StartAction.TRAIN, "the job has no committed step yet: training from the seeded weights")
    all_here = participants >= num_groups
    if not all_here and now < deadline:
        return StartDecision(
            StartAction.WAIT,
            f"the job is at step {job_progress} but no peer in the quorum ({participants} of {num_groups} groups) "
            "has progress; waiting for a live peer",
        )
    why = (
        f"all {num_groups} groups are in the quorum at step 0"
        if all_here
        else f"no live peer with progress joined the quorum before the deadline ({participants} of {num_groups} groups)"
    )
    if checkpoint_step is not None:
        return StartDecision(
            StartAction.LOAD_CHECKPOINT,
            f"the job is at step {job_progress} and {why}: loading the fallback checkpoint of step {checkpoint_step}"
            f" ({job_progress - checkpoint_step} committed steps will be redone)",
        )
    return StartDecision(
        StartAction.REFUSE,
        f"the job is at step {job_progress} but {why} and there is no fallback checkpoint: refusing to train "
        "from fresh weights. Restart the groups that still hold the state, or enable trainer.checkpoint "
        "and restore a checkpoint, or start a new job (new name or run_dir) to train from scratch.",
    )
