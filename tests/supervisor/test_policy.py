"""Table-driven tests of the pure restart policy: no clock, no processes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lamplighter.configs.schema import RestartConfig
from lamplighter.policy.observations import Hung, LighthouseDown, Observation, ProcessExited
from lamplighter.policy.restart import GroupState, PolicyState, backoff_s, decide


def exited(g: int, rc: int, attempt: int = 0) -> ProcessExited:
    return ProcessExited(group=g, rank=0, attempt=attempt, pid=1000 + g, returncode=rc, t=0.0)


def hung(g: int, attempt: int = 0) -> Hung:
    return Hung(group=g, attempt=attempt, pid=1000 + g, last_step=7, silent_s=31.0, timeout_s=30.0)


CFG = RestartConfig(
    budget_per_group=3,
    backoff_initial_s=1.0,
    backoff_factor=2.0,
    backoff_max_s=3.0,
    crash_loop_window_s=100.0,
    crash_loop_max=3,
)
S0 = PolicyState.initial(2)


def with_group(st: PolicyState, g: int, gs: GroupState) -> PolicyState:
    groups = list(st.groups)
    groups[g] = gs
    return replace(st, groups=tuple(groups))


CASES: list[tuple[str, PolicyState, list[Observation], list[tuple[str, int | None]], str, str]] = [
    # id, state, observations, expected (action, group) list, group-0 status after, substring of a reason
    ("crash -> kill, backoff", S0, [exited(0, 75)], [("kill", 0)], "backoff", "exit 75"),
    ("signal -> kill, backoff", S0, [exited(0, -9)], [("kill", 0)], "backoff", "SIGKILL"),
    ("hang -> kill, backoff", S0, [hung(0)], [("kill", 0)], "backoff", "hung"),
    ("exit 0 -> done", S0, [exited(0, 0)], [("done", 0)], "done", "target"),
    (
        "no-restart code -> give up",
        S0,
        [exited(0, 78)],
        [("kill", 0), ("give_up", 0)],
        "given_up",
        "no_restart_exit_codes",
    ),
    ("stale attempt ignored", S0, [exited(0, 75, attempt=5)], [], "running", ""),
    (
        "group in backoff ignores more",
        with_group(S0, 0, GroupState(status="backoff", restart_at=50.0)),
        [exited(0, -9)],
        [],
        "backoff",
        "",
    ),
    (
        "budget exhausted -> give up",
        with_group(S0, 0, GroupState(restarts=3)),
        [exited(0, 75)],
        [("kill", 0), ("give_up", 0)],
        "given_up",
        "budget exhausted",
    ),
    (
        "crash loop -> give up",
        with_group(S0, 0, GroupState(failures=(5.0, 9.0), restarts=2)),
        [exited(0, 75)],
        [("kill", 0), ("give_up", 0)],
        "given_up",
        "crash loop",
    ),
    (
        "old failures outside window do not count",
        with_group(S0, 0, GroupState(failures=(-200.0, -150.0), restarts=1)),
        [exited(0, 75)],
        [("kill", 0)],
        "backoff",
        "restart 2/3",
    ),
    (
        "backoff due -> restart",
        with_group(S0, 0, GroupState(status="backoff", restart_at=9.0)),
        [],
        [("restart", 0)],
        "running",
        "",
    ),
    ("backoff not yet due", with_group(S0, 0, GroupState(status="backoff", restart_at=11.0)), [], [], "backoff", ""),
    (
        "failure while finishing -> stop",
        replace(S0, finishing_since=5.0),
        [exited(0, 75)],
        [("kill", 0), ("stop", 0)],
        "stopped",
        "finishing",
    ),
    (
        "lighthouse down -> restart it",
        replace(S0, lighthouse=GroupState(restarts=0)),
        [LighthouseDown(pid=1, returncode=-9, t=0.0)],
        [],
        "running",
        "",
    ),
]


@pytest.mark.parametrize("state,obs,expected,status,reason_part", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_policy_table(
    state: PolicyState, obs: list[Observation], expected: list[tuple[str, int | None]], status: str, reason_part: str
) -> None:
    v = decide(10.0, state, obs, CFG)
    assert [(d.action, d.group) for d in v.decisions] == expected
    assert v.state.groups[0].status == status
    if reason_part:
        assert any(reason_part in d.reason for d in v.decisions), [d.reason for d in v.decisions]


def test_backoff_grows_by_factor_up_to_max() -> None:
    assert [backoff_s(n, CFG) for n in range(4)] == [1.0, 2.0, 3.0, 3.0]


def test_zero_backoff_restarts_in_the_same_call_with_new_attempt() -> None:
    cfg = CFG.model_copy(update={"backoff_initial_s": 0.0})
    v = decide(10.0, S0, [exited(1, -9)], cfg)
    assert [(d.action, d.group) for d in v.decisions] == [("kill", 1), ("restart", 1)]
    assert v.state.groups[1].attempt == 1 and v.state.groups[1].restarts == 1
    # The killed attempt's straggler exit is not a new failure.
    v2 = decide(11.0, v.state, [exited(1, -9, attempt=0)], cfg)
    assert v2.decisions == [] and v2.state.groups[1].status == "running"


def test_restart_waits_for_backoff_then_happens() -> None:
    v = decide(10.0, S0, [exited(0, 75)], CFG)
    assert v.state.groups[0].restart_at == 11.0
    assert decide(10.5, v.state, [], CFG).decisions == []
    v2 = decide(11.0, v.state, [], CFG)
    assert [(d.action, d.group, d.not_before) for d in v2.decisions] == [("restart", 0, 11.0)]


def test_lighthouse_restart_and_give_up() -> None:
    cfg = CFG.model_copy(update={"backoff_initial_s": 0.0})
    v = decide(10.0, S0, [LighthouseDown(pid=1, returncode=-9, t=10.0)], cfg)
    assert [d.action for d in v.decisions] == ["restart_lighthouse"]
    assert v.state.lighthouse.status == "running" and v.state.lighthouse.restarts == 1
    st = replace(S0, lighthouse=GroupState(restarts=3))
    v = decide(10.0, st, [LighthouseDown(pid=1, returncode=1, t=10.0)], cfg)
    assert [d.action for d in v.decisions] == ["give_up", "finish"]
    assert "Lighthouse" in v.decisions[-1].reason


def test_finish_when_all_groups_done_and_stragglers_killed_after_grace() -> None:
    v = decide(10.0, S0, [exited(0, 0)], CFG, finish_grace_s=5.0)
    assert v.state.finishing_since == 10.0 and not v.state.finished
    assert decide(14.0, v.state, [], CFG, finish_grace_s=5.0).decisions == []
    v2 = decide(16.0, v.state, [], CFG, finish_grace_s=5.0)
    assert [(d.action, d.group) for d in v2.decisions] == [("kill", 1), ("stop", 1), ("finish", None)]
    assert v2.state.finished
    v3 = decide(11.0, v.state, [exited(1, 0)], CFG)
    assert [d.action for d in v3.decisions] == ["done", "finish"]
    assert "2/2 groups reached the target" in v3.decisions[-1].reason


def test_all_given_up_finishes_with_reasons() -> None:
    v = decide(1.0, S0, [exited(0, 78), exited(1, 78)], CFG)
    assert v.decisions[-1].action == "finish"
    assert "none did" in v.decisions[-1].reason and "no_restart_exit_codes" in v.decisions[-1].reason
