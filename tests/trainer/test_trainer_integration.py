"""The reference trainer on real parts: torchft Lighthouse, Manager, gloo, separate processes."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Trainers
from realparts import wait_for

from lamplighter.configs.schema import JobConfig
from lamplighter.rundir import contract
from lamplighter.rundir.steplog import StepRecord, read_steps
from lamplighter.rundir.stop_at import write_stop_at
from lamplighter.trainer.fallback_checkpoint import load_checkpoint
from lamplighter.trainer.main import INJECTED_MESSAGE
from lamplighter.trainer.progress import read_job_progress

pytestmark = pytest.mark.integration

TINY = {"dim": 32, "layers": 1, "heads": 2, "seq_len": 16, "batch_size": 4, "vocab_size": 64}
EXIT_DEADLINE_S = 90  # bounds only: a busy 2-core machine may be slow


def tiny_job(
    steps: int, count: int = 2, checkpoint: dict[str, Any] | None = None, transport: str = "http", min_replicas: int = 1
) -> JobConfig:
    return JobConfig.model_validate(
        {
            "name": "tiny",
            "groups": {"count": count},
            "torchft": {"quorum_timeout_s": 2},
            "lighthouse": {"min_replicas": min_replicas},
            "trainer": {
                "steps": steps,
                "model": TINY,
                "checkpoint": checkpoint or {"enabled": False},
                "checkpoint_transport": transport,
            },
        }
    )


def steps_of(t: Trainers, replica: int) -> list[StepRecord]:
    return read_steps(contract.RunPaths(t.run_dir).steps(replica))


def committed(t: Trainers, replica: int) -> list[StepRecord]:
    return [r for r in steps_of(t, replica) if r.committed]


def last_step(t: Trainers, replica: int) -> int:
    recs = committed(t, replica)
    return recs[-1].step if recs else 0


def assert_no_step_lost(recs: list[StepRecord]) -> None:
    """Committed steps of one process lifetime go up by exactly one: nothing skipped, nothing rolled back."""
    steps = [r.step for r in recs]
    assert steps == list(range(steps[0], steps[0] + len(steps))), steps


def assert_same_hashes(a: list[StepRecord], b: list[StepRecord]) -> int:
    ha, hb = {r.step: r.state_hash for r in a}, {r.step: r.state_hash for r in b}
    common = sorted(set(ha) & set(hb))
    assert common, "no common step"
    assert [s for s in common if ha[s] != hb[s]] == []
    return len(common)


MakeTrainers = Callable[[JobConfig], Trainers]


@pytest.mark.parametrize("lighthouse", [2], indirect=True)  # no quorum until both groups are up
def test_two_groups_train_to_target_in_lockstep(make_trainers: MakeTrainers) -> None:
    t = make_trainers(tiny_job(steps=30, min_replicas=2))
    procs = [t.start(0), t.start(1)]
    for p in procs:
        assert p.wait(EXIT_DEADLINE_S) == contract.EXIT_DONE
    a, b = committed(t, 0), committed(t, 1)
    assert a[-1].step == b[-1].step == 30
    assert_no_step_lost(a)
    assert_no_step_lost(b)
    assert [r.step for r in a] == [r.step for r in b] == list(range(1, 31))
    assert assert_same_hashes(a, b) == 30
    # Every step: two adjacent, distinct slices, and the cursor moved past both.
    for ra, rb in zip(a, b, strict=True):
        assert ra.participants == rb.participants == 2
        assert sorted([ra.first_sample, rb.first_sample]) == [8 * (ra.step - 1), 8 * (ra.step - 1) + 4]
    hb = contract.RunPaths(t.run_dir).heartbeat(0, 0).read_text()
    assert '"step": 30' in hb


@pytest.mark.parametrize("transport", ["http", "pg"])
def test_killed_group_heals_from_live_peer_bit_identical(make_trainers: MakeTrainers, transport: str) -> None:
    t = make_trainers(tiny_job(steps=1_000_000, transport=transport))
    t.start(0)
    victim = t.start(1)
    # Both must hold the state: a survivor that never trained cannot heal anyone (and must refuse).
    wait_for(lambda: min(last_step(t, 0), last_step(t, 1)) >= 10, EXIT_DEADLINE_S, "both groups to commit 10 steps")
    victim.kill()
    victim.wait()
    killed_at = last_step(t, 1)
    t.start(1, attempt=1)
    wait_for(
        lambda: (
            any(r.attempt == 1 and r.step >= 5 + killed_at for r in committed(t, 1))
            and last_step(t, 0) > last_step(t, 1) - 1
        ),
        EXIT_DEADLINE_S,
        "the restarted group to commit steps",
    )
    wait_for(
        lambda: last_step(t, 0) >= max(r.step for r in committed(t, 1)), EXIT_DEADLINE_S, "the survivor to catch up"
    )
    t.stop_all()
    survivor = committed(t, 0)
    assert_no_step_lost(survivor)
    assert [r.attempt for r in survivor] == [0] * len(survivor)
    restarted = [r for r in committed(t, 1) if r.attempt == 1]
    assert_no_step_lost(restarted)
    first = restarted[0]
    assert first.healed_from == "peer:0"
    assert first.step > killed_at  # it resumed from the peer's progress, not from scratch
    hs = {r.step: r.state_hash for r in survivor}
    assert first.state_hash == hs[first.step]  # bit-identical to the peer at the same step
    assert_same_hashes(survivor, restarted)
    assert "healed from peer:0" in t.log_text(1, attempt=1)


def test_a_running_job_stops_at_the_step_its_owner_writes_in_stop_at(make_trainers: MakeTrainers) -> None:
    """A job trained "until told": trainer.steps far out, then the owner's stop-at file ends it at a step."""
    t = make_trainers(tiny_job(steps=1_000_000))
    procs = [t.start(0), t.start(1)]
    wait_for(lambda: min(last_step(t, 0), last_step(t, 1)) >= 10, EXIT_DEADLINE_S, "both groups to commit 10 steps")
    # Far enough ahead that both groups read the file (at most a second apart) before they get there.
    end = max(last_step(t, 0), last_step(t, 1)) + 100
    write_stop_at(t.run_dir, end)
    for p in procs:
        assert p.wait(EXIT_DEADLINE_S) == contract.EXIT_DONE
    assert last_step(t, 0) == last_step(t, 1) == end
    assert f"target now step {end}" in t.log_text(0)
    late = t.start(0, attempt=1)  # a group that starts after the end finds the job done
    assert late.wait(EXIT_DEADLINE_S) == contract.EXIT_DONE
    assert f"the job already reached step {end} (target {end}): nothing to do" in t.log_text(0, attempt=1)


def kill_both_after(t: Trainers, steps: int, cond: Callable[[], bool] = lambda: True) -> int:
    p0, p1 = t.start(0), t.start(1)
    wait_for(lambda: last_step(t, 0) >= steps and cond(), EXIT_DEADLINE_S, f"{steps} steps")
    for p in (p0, p1):
        p.kill()
        p.wait()
    return max(last_step(t, 0), last_step(t, 1))


def test_no_live_peer_and_no_checkpoint_refuses(make_trainers: MakeTrainers) -> None:
    t = make_trainers(tiny_job(steps=1_000_000))
    # Killed once the progress file says 10 too, not the step log alone: a kill between a step's record and its
    # progress file left it at 9 (CI at 4cf44e6), under the 10 this test asserts.
    progress_dir = contract.RunPaths(t.run_dir).progress_dir()
    progress = kill_both_after(t, 10, lambda: read_job_progress(progress_dir) >= 10)
    p = t.start(0, attempt=1)
    assert p.wait(EXIT_DEADLINE_S) == contract.EXIT_NO_RESTART
    log = t.log_text(0, attempt=1)
    assert "refusing to train" in log
    said = re.search(r"the job is at step (\d+)", log)
    assert said, log
    # A kill between a step's record and its progress file leaves the progress
    # one behind (CI saw 11 for 12): the message reports what the trainer read.
    reported = int(said.group(1))
    assert reported == read_job_progress(contract.RunPaths(t.run_dir).progress_dir())
    assert 10 <= reported <= progress
    assert not [r for r in steps_of(t, 0) if r.attempt == 1]  # it never trained


def test_a_fenced_trainer_leaves_retryable_not_no_restart(make_trainers: MakeTrainers) -> None:
    """Soak finding: a stale attempt's exit status became the Slurm job's, and 78 made its group be given up."""
    t = make_trainers(tiny_job(steps=1_000_000))
    fence = contract.RunPaths(t.run_dir).fence(0)
    fence.parent.mkdir(parents=True, exist_ok=True)
    fence.write_text('{"job_id": "", "attempt": 5}')  # a newer attempt of group 0 holds the fence
    p = t.start(0, attempt=1)
    assert p.wait(EXIT_DEADLINE_S) == contract.EXIT_RETRYABLE
    assert "fenced: attempt 5 of this group" in t.log_text(0, attempt=1)
    assert not steps_of(t, 0)


def test_no_live_peer_loads_fallback_checkpoint_in_all_groups(make_trainers: MakeTrainers) -> None:
    t = make_trainers(tiny_job(steps=1_000_000, checkpoint={"enabled": True, "interval_s": 0.2}))
    ck_dir = contract.RunPaths(t.run_dir).checkpoint_dir()
    kill_both_after(t, 10, cond=lambda: (ck_dir / "fallback.pt").exists())
    ck = load_checkpoint(ck_dir)
    assert ck is not None and ck.step > 0
    t.start(0, attempt=1)  # every group restarts at once, as after a Lighthouse restart
    t.start(1, attempt=1)

    def resumed(replica: int) -> list[StepRecord]:
        return [r for r in committed(t, replica) if r.attempt == 1]

    wait_for(lambda: len(resumed(0)) >= 3 and len(resumed(1)) >= 3, EXIT_DEADLINE_S, "both groups to resume")
    t.stop_all()
    for replica in (0, 1):
        rec = resumed(replica)
        assert rec[0].step == ck.step + 1, "resumed from the checkpoint, not from scratch"
        assert rec[0].healed_from in (f"checkpoint:{ck.step}", "peer:0", "peer:1")
        assert_no_step_lost(rec)
    assert_same_hashes(resumed(0), resumed(1))
    assert any(r[0].healed_from == f"checkpoint:{ck.step}" for r in (resumed(0), resumed(1)))


def test_injected_exception_exits_retryable(make_trainers: MakeTrainers, tmp_path: Path) -> None:
    t = make_trainers(tiny_job(steps=1_000_000, count=1))
    p = t.start(0)
    wait_for(lambda: last_step(t, 0) >= 3, EXIT_DEADLINE_S, "3 steps")
    inject = contract.RunPaths(t.run_dir).inject_exception(0)
    inject.parent.mkdir(parents=True, exist_ok=True)
    inject.write_text("")
    assert p.wait(EXIT_DEADLINE_S) == contract.EXIT_RETRYABLE
    assert not inject.exists()
    log = t.log_text(0)
    assert "Traceback" in log and INJECTED_MESSAGE in log


@pytest.mark.parametrize("lighthouse", [2], indirect=True)  # no quorum until both groups are up
def test_a_quorum_that_times_out_is_asked_again_and_the_process_keeps_its_state(make_trainers: MakeTrainers) -> None:
    """Found in `make bench`: the last live group's quorum timed out while its peers were starting, it exited,
    and the job fell back to its checkpoint. Here group 0 waits alone for a quorum of two (2 s timeout), asks
    again when it times out, and trains with group 1 once it is up, in the same process."""
    t = make_trainers(tiny_job(steps=20, min_replicas=2))
    first = t.start(0)
    wait_for(lambda: "the quorum timed out" in t.log_text(0), EXIT_DEADLINE_S, "group 0's first quorum to time out")
    assert first.poll() is None
    second = t.start(1)
    assert first.wait(EXIT_DEADLINE_S) == contract.EXIT_DONE and second.wait(EXIT_DEADLINE_S) == contract.EXIT_DONE
    a = committed(t, 0)
    assert [r.step for r in a] == list(range(1, 21)) and {r.attempt for r in a} == {0}
    assert "asking again (1/" in t.log_text(0)
