"""The survivors' stall against the group count (bench/stall_groups.py): where one survivor's stall went, from
its commits and torchft's timed recovery steps, and the fit the plan takes. Pure."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from lamplighter.rundir.steplog import StepRecord

REPO = Path(__file__).resolve().parents[2]


def commit(t: float, step: int, participants: int) -> StepRecord:
    return StepRecord(t, 0, step, True, participants, 1, None, 1.0, "h", 0, 8, 0)


def test_a_survivors_stall_splits_into_the_failed_step_the_quorum_the_setup_and_the_next_step(
    bench: ModuleType,
) -> None:
    from bench.stall_groups import survivor_at_fault, survivor_at_rejoin

    commits = [commit(float(t), t, 3) for t in range(1, 11)] + [commit(12.2, 11, 2), commit(13.2, 12, 2)]
    commits += [commit(14.6, 13, 3), commit(15.6, 14, 3)]
    events = [
        {"e": "error", "t": 10.6},
        {"e": "lh_start", "t": 10.7},
        {"e": "lh_done", "t": 11.1},
        {"e": "pg_start", "t": 11.1},
        {"e": "pg_done", "t": 11.3},
    ]
    got = survivor_at_fault(commits, events, 10.5)
    assert got is not None
    assert got["stall_s"] == pytest.approx(1.2)  # 10 -> 12.2 against its 1 s step
    assert (got["failed_step_s"], got["quorum_s"], got["pg_s"], got["step_s"]) == pytest.approx((0.2, 0.4, 0.2, 0.9))
    assert got["quorums"] == 1 and got["errors"] == 1
    assert survivor_at_rejoin(commits, 3, 10.5) == pytest.approx(0.4)  # 13.2 -> 14.6, the group back in


def test_the_fit_is_base_plus_a_cost_per_group(bench: ModuleType) -> None:
    from bench.stall_groups import fit, schedule

    assert fit([(3, 0.6), (6, 0.9), (12, 1.5)]) == {"base_s": pytest.approx(0.3), "per_group_s": pytest.approx(0.1)}
    assert fit([(3, 0.6), (3, 0.7)]) is None  # one size says nothing about growth
    plan = schedule(4, ["kill", "node-crash", "hang"], 2, 15.0)
    assert [(f["kind"], f["group"]) for f in plan] == [
        ("kill", 1),
        ("hang", 2),
        ("hang-collective", 3),
        ("kill", 1),
        ("hang", 2),
        ("hang-collective", 3),
    ]
    assert [f["at_s"] for f in plan] == [8.0 + 15.0 * i for i in range(6)]
