from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.trainer.progress import StartAction, decide_start, read_job_progress, write_progress

BASE = dict(
    now=10.0, deadline=20.0, job_progress=50, manager_step=0, participants=1, num_groups=3, checkpoint_step=None
)


def decide(**kw: object) -> StartAction:
    args = {**BASE, **kw}
    return decide_start(**args).action  # type: ignore[arg-type]


def test_new_job_trains_from_scratch() -> None:
    assert decide(job_progress=0) is StartAction.TRAIN


def test_healed_from_peer_trains() -> None:
    assert decide(manager_step=50) is StartAction.TRAIN


def test_waits_for_a_live_peer_before_the_deadline() -> None:
    assert decide(checkpoint_step=40) is StartAction.WAIT
    assert decide() is StartAction.WAIT


def test_after_deadline_checkpoint_or_refuse() -> None:
    assert decide(now=20.0, checkpoint_step=40) is StartAction.LOAD_CHECKPOINT
    assert decide(now=20.0) is StartAction.REFUSE


def test_all_groups_at_step_zero_decide_at_once() -> None:
    assert decide(participants=3, checkpoint_step=40) is StartAction.LOAD_CHECKPOINT
    d = decide_start(**{**BASE, "participants": 3})  # type: ignore[arg-type]
    assert d.action is StartAction.REFUSE
    assert "step 50" in d.reason and "no fallback checkpoint" in d.reason


def test_job_progress_is_the_max_and_tolerates_junk(tmp_path: Path) -> None:
    d = tmp_path / "progress"
    assert read_job_progress(d) == 0
    write_progress(d / "0.json", 7)
    write_progress(d / "1.json", 12)
    (d / "2.json").write_text("{torn")
    assert read_job_progress(d) == 12


@pytest.mark.parametrize("step", [0, 1, 99])
def test_progress_roundtrip(tmp_path: Path, step: int) -> None:
    write_progress(tmp_path / "p" / "3.json", step)
    assert read_job_progress(tmp_path / "p") == step


def test_a_failed_heal_is_never_taken_for_every_group_at_step_zero() -> None:
    """kill-healer finding: the peer sending the state died mid-transfer, the step stayed 0 with all 3 groups in
    the quorum, and the group refused to train (exit 78, given up) although two peers held the state."""
    failed = {"participants": 3, "heal_error": "RuntimeError: Trying to resize storage that is not resizable"}
    assert decide(**failed) is StartAction.WAIT
    assert decide(**failed, checkpoint_step=40) is StartAction.WAIT  # not back to the checkpoint either
    d = decide_start(**{**BASE, **failed, "now": 20.0})  # type: ignore[arg-type]
    assert d.action is StartAction.RESTART and "resize storage" in d.reason
