"""The cluster's one drain budget: a drain is a claim checked after it is made, ranked by Slurm's stamps.

The pure rule (policy.ratelimit.claim_holds) over the interleavings that break a check made before the drain;
then confirm_drain and the executor on the fake Slurm, where every node drains "at the same instant"."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.policy.ratelimit import budget_limit, claim_holds
from lamplighter.rundir.actions import ActionLog
from lamplighter.slurm.drain_budget import confirm_drain, held_out
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.metrics import DaemonMetrics
from lamplighter.supervisor.node_policy import NodeAction
from lamplighter.supervisor.state_store import DaemonState


def test_first_come_first_kept_ties_by_name_and_unstamped_count_first() -> None:
    held = [(10.0, "n5"), (10.0, "n2"), (9.0, "n7"), (None, "n9")]
    assert [claim_holds(n, held, 8, 0.25)[0] for n in ("n9", "n7", "n2", "n5")] == [True, True, False, False]
    _, why = claim_holds("n2", held, 8, 0.25)
    assert "budget spent by earlier drains (n9, n7)" in why and "4 of 8 nodes" in why
    assert claim_holds("n3", held, 8, 0.25) == (True, "n3 is no longer out of service by lamplighter: nothing to keep")
    assert budget_limit(3, 0.25) == 0 and not claim_holds("n1", [(1.0, "n1")], 3, 0.25)[0]
    assert budget_limit(3, 1 / 3) == 1


@pytest.mark.parametrize("order", list(itertools.permutations(["n1", "n2", "n3", "n4"])))
def test_every_interleaving_within_one_second_keeps_exactly_the_budget(order: tuple[str, ...]) -> None:
    """Four nodes drain within one stamped second, in any order; each ranks once all are visible (settled):
    exactly the budget is kept, and every racer agrees which."""
    held = [(100.0, n) for n in order]
    kept = [n for n in order if claim_holds(n, held, 8, 0.25)[0]]
    assert sorted(kept) == ["n1", "n2"]


def clocked() -> tuple[FakeSlurm, list[float]]:
    now = [1_000_000.25]
    return FakeSlurm([f"n{i}" for i in range(1, 9)], clock=lambda: now[0]), now


def test_confirm_waits_for_the_controller_to_leave_the_second_then_undoes_a_drain_past_the_budget() -> None:
    slurm, now = clocked()
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    for n in ("n1", "n2", "n3"):  # three drains in one second, budget 2 (0.25 of 8)
        slurm.drain(n, f"lamplighter: test {n}")
    results = {n: confirm_drain(slurm, n, 0.25, sleep) for n in ("n3", "n1", "n2")}
    assert slept and now[0] >= 1_000_001.0  # it waited until the stamp's second had passed
    assert results["n3"].undone and not results["n3"].kept and "budget spent" in results["n3"].reason
    assert results["n1"].kept and results["n2"].kept
    assert not slurm.node("n3").is_drained and slurm.node("n1").is_drained and slurm.node("n2").is_drained
    assert [n for _, n in held_out(slurm.nodes())] == ["n1", "n2"]


def test_an_admins_reason_in_between_is_never_undone() -> None:
    slurm, now = clocked()
    slurm.drain("n1", "lamplighter: a")
    slurm.drain("n2", "lamplighter: b")
    slurm.drain("n3", "lamplighter: c")

    def sleep(s: float) -> None:
        now[0] += s
        slurm.drain("n3", "admin: swapping the board")  # the admin's drain lands while n3 waits

    res = confirm_drain(slurm, "n3", 0.25, sleep)
    assert res.kept and not res.undone
    assert slurm.node("n3").reason == "admin: swapping the board" and slurm.node("n3").is_drained


def executor(
    tmp_path: Path,
    node: str,
    slurm: FakeSlurm,
    now: list[float],
    lines: list[str],
    metrics: DaemonMetrics | None = None,
) -> Executor:
    def sleep(s: float) -> None:
        now[0] += s

    return Executor(
        DaemonState.load(tmp_path / node),
        slurm,
        None,
        ActionLog(node, lines.append, on_action=None if metrics is None else metrics.action),
        clock=lambda: now[0],
        drain_budget=0.25,
        sleep=sleep,
    )


def test_eight_daemons_draining_at_once_keep_the_budget_and_an_undone_drain_is_not_counted_as_done(
    tmp_path: Path,
) -> None:
    slurm, now = clocked()
    nodes = [f"n{i}" for i in range(1, 9)]
    lines: dict[str, list[str]] = {n: [] for n in nodes}
    metrics = {n: DaemonMetrics() for n in nodes}
    executors = {n: executor(tmp_path, n, slurm, now, lines[n], metrics[n]) for n in nodes}
    # Every daemon drains before any confirms: the instant a wrong threshold strikes the whole cluster.
    for n in nodes:
        slurm.drain(n, f"lamplighter: wrong threshold on {n}")
    slurm_drain = slurm.drain
    slurm.drain = lambda node, reason: None  # type: ignore[method-assign]  # already drained above
    results = {
        n: executors[n].execute(now[0], [NodeAction("drain", n, f"lamplighter: wrong threshold on {n}", {})])[0]
        for n in nodes
    }
    slurm.drain = slurm_drain  # type: ignore[method-assign]
    assert sorted(n for n in nodes if slurm.node(n).is_drained) == ["n1", "n2"]
    assert {n: r["outcome"] for n, r in results.items()} == {n: "ok" if n in ("n1", "n2") else "undone" for n in nodes}
    assert any('"outcome":"undone"' in line.replace(" ", "") for line in lines["n5"])

    # deploy/README: every undone drain counts as lamplighter_actions_total{action="resume",outcome="undone"}.
    def counted(n: str, action: str, outcome: str) -> float:
        labels = {"action": action, "outcome": outcome, "job_name": ""}
        return metrics[n].registry.get_sample_value("lamplighter_actions_total", labels) or 0.0

    assert {n: counted(n, "resume", "undone") for n in nodes} == {n: 0.0 if n in ("n1", "n2") else 1.0 for n in nodes}
    assert executors["n5"].state.drain_history() == []  # it drained nothing that stays: its own window is clear
    assert executors["n1"].state.drain_history() == [(1_000_000.25, "n1")]
