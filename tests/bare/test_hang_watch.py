"""A bare-metal host's hang check over a group restarted in place (same epoch, so the same attempt)."""

from __future__ import annotations

import os
import pwd
import time
from pathlib import Path

import pytest

from lamplighter.bare.hang_watch import JobHangWatch
from lamplighter.configs.schema import JobConfig
from lamplighter.rundir.contract import RunPaths
from lamplighter.system.trainer_proc import TrainerProc
from lamplighter.trainer.heartbeat import write_heartbeat


def test_a_trainer_restarted_under_the_same_epoch_is_not_judged_by_the_killed_ones_heartbeat(tmp_path: Path) -> None:
    """Found in `make demo-bare`: the restarted trainer was killed as hung 0.5 s after it started, its silence
    counted from the last heartbeat of the trainer killed before it (attempt 1 both)."""
    job = JobConfig.model_validate(
        {
            "name": "j",
            "run_dir": str(tmp_path),
            # The fixed hang timeout: one beat per attempt teaches no pace (tests/supervisor/test_progress_pace.py).
            "health": {"hang_timeout_s": 5, "startup_timeout_s": 30, "progress": "heartbeat", "hang_pace_factor": 0},
            "torchft": {"pg_timeout_s": 1, "timeout_s": 1, "quorum_timeout_s": 2},
            "lighthouse": {"port": 29510, "join_timeout_ms": 100},
        }
    )
    now = time.time()
    beat = RunPaths(tmp_path).heartbeat(0, 0)
    write_heartbeat(beat, step=76, now=now - 10, pid=111, attempt=1)  # the hung trainer's last beat
    watch = JobHangWatch(job)
    old = TrainerProc(group=0, rank=0, attempt=1, pid=111, started_at=now - 60)
    [hung] = watch.observe(now, [old])
    assert hung.last_step == 76  # the hung one is judged by its beat
    new = TrainerProc(group=0, rank=0, attempt=1, pid=222, started_at=now - 0.5)
    assert watch.observe(now, [new]) == []  # starting: its own startup time, not the old beat's silence
    write_heartbeat(beat, step=77, now=now + 1, pid=222, attempt=1)
    assert watch.observe(now + 5.9, [new]) == []
    [again] = watch.observe(now + 6.1, [new])
    assert again.last_step == 77 and again.started


def test_a_trainer_running_as_the_jobs_account_is_judged_by_its_own_heartbeats(tmp_path: Path) -> None:
    """A bare-metal host runs trainers as the job's account: their heartbeat files are that uid's, and only that
    uid's count (a file of any other user in the run directory is none of theirs)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the heartbeat file to another uid")
    job = JobConfig.model_validate(
        {
            "name": "j",
            "run_dir": str(tmp_path),
            "health": {"hang_timeout_s": 5, "startup_timeout_s": 30, "progress": "heartbeat", "hang_pace_factor": 0},
            "torchft": {"pg_timeout_s": 1, "timeout_s": 1, "quorum_timeout_s": 2},
            "lighthouse": {"port": 29510, "join_timeout_ms": 100},
        }
    )
    account = pwd.getpwnam("nobody").pw_uid
    now = time.time()
    beat = RunPaths(tmp_path).heartbeat(0, 0)
    write_heartbeat(beat, step=3, now=now - 10, pid=111, attempt=0)
    os.chown(beat, account, account)
    proc = TrainerProc(group=0, rank=0, attempt=0, pid=111, started_at=now - 60)
    [hung] = JobHangWatch(job, owner=account).observe(now, [proc])
    assert hung.started and hung.last_step == 3  # hung at step 3, from the account's own beat
    [judged_as_root] = JobHangWatch(job).observe(now, [proc])
    assert not judged_as_root.started  # the same file, not root's: no progress counted from it
