"""A host daemon's pure decision: fence, kill stale epochs, start what is assigned, restart or give up."""

from __future__ import annotations

from lamplighter.bare.host_agent import GroupHistory, Trainer, decide
from lamplighter.bare.placement import Assignment
from lamplighter.configs.schema import RestartConfig

OK = (False, "lease good")
POLICY = {"j": RestartConfig(budget_per_group=2, backoff_initial_s=1.0, crash_loop_max=10)}


def kinds(d) -> list[tuple[str, int, int]]:  # type: ignore[no-untyped-def]
    return [(a.kind, a.group, a.epoch) for a in d.actions]


def test_a_host_whose_lease_may_expire_kills_everything_and_starts_nothing() -> None:
    d = decide(
        0.0,
        "h1",
        {("j", 0): Assignment("h1", 3), ("j", 1): Assignment("h1", 1)},
        [Trainer("j", 0, 3, pid=100)],
        {},
        POLICY,
        (True, "lease not renewed for 2.6 s"),
    )
    assert kinds(d) == [("kill", 0, 3)] and "fencing: lease not renewed" in d.actions[0].reason


def test_stale_epochs_are_killed_and_the_assigned_group_is_started() -> None:
    assigned = {("j", 0): Assignment("h1", 4), ("j", 1): Assignment("h2", 2)}
    trainers = [Trainer("j", 0, 3, pid=100), Trainer("j", 1, 1, pid=101)]
    d = decide(0.0, "h1", assigned, trainers, {}, POLICY, OK)
    assert kinds(d) == [("kill", 0, 3), ("kill", 1, 1), ("start", 0, 4)]
    assert "now epoch 4 on h1" in d.actions[0].reason and "now epoch 2 on h2" in d.actions[1].reason
    running = [Trainer("j", 0, 4, pid=102)]
    assert decide(1.0, "h1", assigned, running, d.history, POLICY, OK).actions == []


def test_a_failed_trainer_is_restarted_after_its_backoff_then_given_up_to_the_placer() -> None:
    assigned = {("j", 0): Assignment("h1", 1)}
    hist = {("j", 0): GroupHistory(1)}
    d = decide(10.0, "h1", assigned, [Trainer("j", 0, 1, 100, exit_code=1)], hist, POLICY, OK)
    assert d.actions == [] and d.history[("j", 0)].restart_at == 11.0  # backoff 1 s
    assert decide(10.5, "h1", assigned, [], d.history, POLICY, OK).actions == []
    d = decide(11.0, "h1", assigned, [], d.history, POLICY, OK)
    assert kinds(d) == [("start", 0, 1)] and "restart 1" in d.actions[0].reason
    d = decide(12.0, "h1", assigned, [Trainer("j", 0, 1, 101, exit_code=1)], d.history, POLICY, OK)
    d = decide(20.0, "h1", assigned, [], d.history, POLICY, OK)
    assert kinds(d) == [("start", 0, 1)]
    d = decide(21.0, "h1", assigned, [Trainer("j", 0, 1, 102, exit_code=1)], d.history, POLICY, OK)
    assert kinds(d) == [("report_failed", 0, 1)] and "budget" in d.actions[0].reason
    assert decide(30.0, "h1", assigned, [], d.history, POLICY, OK).actions == []  # given up here: said once
    moved = decide(31.0, "h1", {("j", 0): Assignment("h1", 2)}, [], d.history, POLICY, OK)
    assert kinds(moved) == [("start", 0, 2)]  # a new epoch starts a new history


def test_exit_0_is_done_and_a_refusing_trainer_is_not_restarted() -> None:
    assigned = {("j", 0): Assignment("h1", 1), ("j", 1): Assignment("h1", 1)}
    policy = {"j": RestartConfig(no_restart_exit_codes=[78])}
    trainers = [Trainer("j", 0, 1, 100, exit_code=0), Trainer("j", 1, 1, 101, exit_code=78)]
    d = decide(0.0, "h1", assigned, trainers, {}, policy, OK)
    assert kinds(d) == [("done", 0, 1), ("report_failed", 1, 1)]
    assert decide(1.0, "h1", assigned, [], d.history, policy, OK).actions == []


def test_a_trainer_of_an_earlier_submission_of_its_job_is_killed_and_the_new_one_starts() -> None:
    """Cancelled and submitted again (by anyone) between two reads: same name, group and epoch, another job."""
    assigned = {("j", 0): Assignment("h1", 1)}
    old = [Trainer("j", 0, 1, pid=100, spec=7)]
    d = decide(0.0, "h1", assigned, old, {}, POLICY, OK, specs={"j": 9})
    assert kinds(d) == [("kill", 0, 1), ("start", 0, 1)] and "submitted again" in d.actions[0].reason
    same = decide(0.0, "h1", assigned, old, {}, POLICY, OK, specs={"j": 7})
    assert same.actions == []
