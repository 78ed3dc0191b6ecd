"""One restart budget for local mode and the node daemon (policy/restart.py judge_failure)."""

from __future__ import annotations

from lamplighter.configs.schema import NodeConfig, RestartConfig
from lamplighter.policy.observations import ProcessExited
from lamplighter.policy.restart import PolicyState, judge_failure
from lamplighter.policy.restart import decide as local_decide
from lamplighter.supervisor.node_policy import Context, LocalJob, NodePolicyState, TrainerEvent
from lamplighter.supervisor.node_policy import decide as node_decide

CFG = RestartConfig(
    budget_per_group=2,
    backoff_initial_s=1.0,
    backoff_factor=2.0,
    backoff_max_s=3.0,
    crash_loop_window_s=100.0,
    crash_loop_max=3,
)


def test_crash_loop_comes_before_the_budget_and_old_failures_are_forgotten() -> None:
    v = judge_failure(50.0, (10.0, 20.0), 5, CFG)
    assert v.give_up.startswith("crash loop, 3 failures within 100 s") and v.failures == (10.0, 20.0, 50.0)
    v = judge_failure(500.0, (10.0, 20.0), 2, CFG)
    assert v.give_up.startswith("restart budget exhausted after 2 restarts") and v.failures == (500.0,)
    v = judge_failure(500.0, (), 1, CFG)
    assert not v.give_up and v.delay_s == 2.0


def test_local_mode_and_the_daemon_give_up_at_the_same_failure_for_the_same_reason() -> None:
    local, node = PolicyState.initial(1), NodePolicyState()
    gave_up: dict[str, tuple[int, str]] = {}
    for n in range(4):
        now = 1000.0 * n  # far apart: the budget, not the crash loop, decides
        attempt = local.groups[0].attempt
        verdict = local_decide(now, local, [ProcessExited(0, 0, attempt, 1, 1, now)], CFG)
        local = local_decide(now + 10.0, verdict.state, [], CFG).state
        for d in verdict.decisions:
            if d.action == "give_up" and "local" not in gave_up:
                gave_up["local"] = (n, d.reason.split(": ", 1)[1].split("; last")[0])
        ctx = Context("n1", {"7": LocalJob("7", "job", 0, n, ((1, 1),))}, restart={"7": CFG})
        node, actions = node_decide(now, node, [TrainerEvent("exit", "7", n, "exited 1", code=1)], NodeConfig(), ctx)
        for a in actions:
            if a.kind == "give_up" and "node" not in gave_up:
                gave_up["node"] = (n, a.reason.split(": ", 1)[1].split("; last")[0])
    assert gave_up["local"] == gave_up["node"] == (2, judge_failure(0.0, (), 2, CFG).give_up)
