"""What one fault costs, from step logs (pure): a group out costs its share of the job, a stall every group's,
and the next fault waits until the job is whole again."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from lamplighter.rundir.steplog import StepRecord

REPO = Path(__file__).resolve().parents[2]


def rec(group: int, t: float, step: int, participants: int = 3, attempt: int = 0) -> StepRecord:
    return StepRecord(
        t=t,
        replica_id=group,
        step=step,
        committed=True,
        participants=participants,
        quorum_id=attempt + 1,  # as the checkpoint-restart trainer logs it: a new run of the job, a new quorum
        healed_from=None,
        loss=1.0,
        state_hash="h",
        attempt=attempt,
        samples=10,
        first_sample=0,
    )


def job_with_one_kill() -> dict[int, list[StepRecord]]:
    """3 groups commit every second; group 2 is killed at 10.5 and commits again at 16 (its new process started
    at 13); the survivors miss one commit (a 1 s stall) and go on without it, in a quorum of all three from 17."""
    steps: dict[int, list[StepRecord]] = {g: [rec(g, float(t), t) for t in range(1, 11)] for g in range(3)}
    for g in (0, 1):
        steps[g] += [rec(g, float(t), t - 1, participants=2) for t in range(12, 17)]
        steps[g] += [rec(g, float(t), t - 1) for t in range(17, 20)]
    steps[2] += [rec(2, float(t), t - 1, attempt=1) for t in range(16, 20)]
    return steps


def test_a_kill_costs_the_groups_time_out_and_the_survivors_stall(bench: ModuleType) -> None:
    from bench.fault_cost import cost
    from bench.runrecord import Fault, RunRecord

    f = Fault(kind="kill", index=2, t_injected=10.5, t_restarted=13.0, t_detected=11.0)
    run = RunRecord("lamplighter", None, 0, 0, 60.0, 3, 0.0, 20.0, True, "slurm", [f], {}, job_with_one_kill())
    c = cost(run, f, settle_s=5.0, cap_s=20.0)
    assert c["detect_s"] == 0.5 and c["back_s"] == 5.5
    assert c["stall_s"] == pytest.approx(1.0)  # 10 -> 12 against a 1 s step
    assert c["whole_s"] == pytest.approx(6.5)  # the survivors commit in a quorum of all three again at 17
    # 6.5 s at the full 30 samples/s; got the survivors' 12..17 (6 x 2 x 10) and group 2's 16 and 17.
    assert c["lost_job_s"] == pytest.approx(6.5 - 140 / 30, abs=1e-3)  # rounded to ms
    assert c["capped_at_s"] is None


def test_a_fault_the_harness_had_to_end_counts_to_its_cap_and_never_comes_back(bench: ModuleType) -> None:
    from bench.fault_cost import cost, summarize
    from bench.runrecord import Fault, RunRecord

    f = Fault(kind="hang", index=2, t_injected=10.5, t_restarted=13.0, released_at=12.5)
    run = RunRecord("poll-10s", None, 0, 0, 60.0, 3, 0.0, 20.0, True, "slurm", [f], {}, job_with_one_kill())
    c = cost(run, f, settle_s=5.0, cap_s=2.0)
    assert c["capped_at_s"] == 2.0 and c["back_s"] is None and c["whole_s"] is None
    assert c["lost_job_s"] == pytest.approx(2.0 - 20 / 30, abs=1e-3)  # to the cap: the survivors' commit at 12
    table = summarize([{"strategy": "poll-10s", **c}])
    assert table["hang"]["poll-10s"]["never"] == 1 and table["hang"]["poll-10s"]["back_s"] is None


def test_the_next_fault_waits_until_every_group_committed_in_a_quorum_of_all_and_settled(bench: ModuleType) -> None:
    from bench.fault_cost import OneAtATime, sequence
    from bench.runrecord import StepFollower
    from bench.slurm_drive import JobView

    assert sequence(("kill", "hang"), 2, 3) == [(0, "kill"), (1, "hang"), (1, "kill"), (2, "hang")]
    job = JobView(3, StepFollower(Path("/nonexistent"), 3))
    trigger = OneAtATime([(2, "kill"), (1, "hang")], settle_s=5.0, cap_s=20.0)
    job.steps.records = {g: [rec(g, float(t), t) for t in range(1, 11)] for g in range(3)}
    first = trigger.due(10.5, 1.0, job)
    assert first is not None and first.group == 2 and first.t == 9.5
    steps = job_with_one_kill()
    job.steps.records = {g: [r for r in steps[g] if r.t <= 15.0] for g in range(3)}
    assert trigger.due(15.0, 1.0, job) is None  # group 2 has not committed again
    job.steps.records = steps
    assert trigger.due(19.5, 1.0, job) is None  # whole since 17, for 2.5 s of the 5 it must settle
    job.steps.records = {g: [*steps[g], rec(g, 21.0, 20)] for g in range(3)}
    nxt = trigger.due(22.2, 1.0, job)
    assert nxt is not None and (nxt.group, nxt.kind) == (1, "hang")
    assert trigger.release(30.0, job) is None and trigger.release(42.3, job) == 1  # its cap: the harness ends it
    assert trigger.release(43.0, job) is None  # once


def test_each_fault_waits_its_own_phase_so_none_is_locked_to_the_poll_runners_cycle(bench: ModuleType) -> None:
    """At f39fd4c every poll-runner kill landed 2 s before its next poll (back 4.9-5.3 s; 8.8 s in the goodput
    runs, whose faults come at any phase): each fault now waits a seeded draw in [0, phase_s) past its settle."""
    from bench.fault_cost import PHASE_S, OneAtATime
    from bench.runrecord import StepFollower
    from bench.slurm_drive import JobView

    order = [(g % 3, "kill") for g in range(20)]
    a, b = OneAtATime(order, 5.0, 20.0, phase_s=PHASE_S), OneAtATime(order, 5.0, 20.0, phase_s=PHASE_S)
    assert a.phases == b.phases  # the same delays for every strategy
    assert all(0.0 <= p < PHASE_S for p in a.phases) and max(a.phases) - min(a.phases) > PHASE_S / 2
    job = JobView(3, StepFollower(Path("/nonexistent"), 3))
    job.steps.records = {g: [rec(g, float(t), t) for t in range(1, 40)] for g in range(3)}
    first_due = 1.0 + 5.0 + a.phases[0]
    assert a.due(first_due - 0.01, 1.0, job) is None
    assert a.due(first_due + 0.01, 1.0, job) is not None


def test_a_job_restart_counts_its_redone_steps_and_the_rate_before_it_is_its_pace_not_its_progress(
    bench: ModuleType,
) -> None:
    from bench.fault_cost import cost
    from bench.runrecord import Fault, RunRecord

    # Checkpoint-restart: every rank commits steps 1..10 at 1..10 s, the job dies at 10.5, every rank runs again
    # from 14 and redoes steps 7..10 (its checkpoint was at step 6) at 15..18, then 11 at 19.
    steps = {g: [rec(g, float(t), t) for t in range(1, 11)] for g in range(3)}
    for g in range(3):
        steps[g] += [rec(g, 15.0 + k, 7 + k, attempt=1) for k in range(5)]
    f = Fault(kind="kill", index=0, t_injected=10.5, t_restarted=14.0, t_detected=11.0)
    run = RunRecord("ckpt-restart", None, 0, 0, 60.0, 3, 0.0, 20.0, True, "slurm", [f], {}, steps)
    c = cost(run, f, settle_s=5.0, cap_s=20.0)
    assert c["whole_s"] == 4.5 and c["back_s"] == 4.5  # every rank commits again at 15
    # Until step 11 at 19: 8.5 s, of which one step's worth (30 samples at 30/s) is new progress.
    assert c["lost_job_s"] == pytest.approx(8.5 - 1.0)
    assert c["stall_s"] == pytest.approx(4.0)  # 10 -> 15 against a 1 s step
