"""The node daemon's pure policy: table-driven, no Slurm, no processes."""

from __future__ import annotations

import pytest

from lamplighter.configs.schema import NodeConfig, RestartConfig
from lamplighter.policy.node_faults import NODE_FAULT_ACTIONS
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.supervisor.node_policy import (
    Context,
    GpuEvent,
    JobTrack,
    LocalJob,
    NodeEvent,
    NodePolicyState,
    TrainerEvent,
    decide,
)

CFG = NodeConfig()
# The job's own restart policy (its job.json), given to the policy in the context.
RESTART = RestartConfig(
    budget_per_group=3, crash_loop_max=3, crash_loop_window_s=100, backoff_initial_s=2, backoff_factor=2
)
JOB = LocalJob("17", "demo", 2, 1, ((4242, 99),))
CTX = Context("n1", {"17": JOB}, total_nodes=4, restart={"17": RESTART})
ECC = GpuEvent(3, "fault", "ecc-uncorrectable", "GPU 3 uncorrectable ECC +2")


def kinds(actions: list) -> list[str]:  # type: ignore[type-arg]
    return [a.kind for a in actions]


@pytest.mark.parametrize(
    ("events", "ctx", "state", "want"),
    [
        ([ECC], CTX, NodePolicyState(), ["kill_local", "drain", "requeue"]),
        ([GpuEvent(3, "unknown", "starting", "x")], CTX, NodePolicyState(), []),
        (
            [ECC],
            Context("n1", {"17": JOB}, node_drained_by_us=True, total_nodes=4, restart={"17": RESTART}),
            NodePolicyState(),
            ["kill_local", "requeue"],
        ),
        # Rate limit: 1 of 4 nodes at 0.25 already drained elsewhere: jobs still move, the drain is refused loudly.
        (
            [ECC],
            Context("n1", {"17": JOB}, drain_history=((0.0, "n2"),), total_nodes=4, restart={"17": RESTART}),
            NodePolicyState(),
            ["kill_local", "log", "requeue"],
        ),
        ([TrainerEvent("exit", "17", 1, "exit 1", code=1)], CTX, NodePolicyState(), ["kill_local", "requeue"]),
        ([TrainerEvent("exit", "17", 1, "done", code=0)], CTX, NodePolicyState(), []),
        ([TrainerEvent("exit", "17", 1, "refused", code=78)], CTX, NodePolicyState(), ["kill_local", "give_up"]),
        ([TrainerEvent("hang", "17", 1, "hung")], CTX, NodePolicyState(), ["kill_local", "requeue"]),
        # An earlier attempt's straggler, or a job already handled: ignored.
        ([TrainerEvent("exit", "17", 0, "old", code=1)], CTX, NodePolicyState({"17": JobTrack(0)}), []),
        ([TrainerEvent("exit", "17", 1, "again", code=1)], CTX, NodePolicyState({"17": JobTrack(1)}), []),
        # Budget: attempt 3 of budget 3; crash loop: 2 recent failures + this one.
        ([TrainerEvent("exit", "17", 3, "x", code=1)], CTX, NodePolicyState(), ["kill_local", "give_up"]),
        (
            [TrainerEvent("exit", "17", 1, "x", code=1)],
            CTX,
            NodePolicyState({"17": JobTrack(0, "running", (50.0, 90.0))}),
            ["kill_local", "give_up"],
        ),
    ],
)
def test_decide(events: list, ctx: Context, state: NodePolicyState, want: list[str]) -> None:  # type: ignore[type-arg]
    _, actions = decide(100.0, state, events, CFG, ctx)
    assert kinds(actions) == want


def test_gpu_fault_reason_and_placement() -> None:
    _, actions = decide(100.0, NodePolicyState(), [ECC], CFG, CTX)
    drain = next(a for a in actions if a.kind == "drain")
    assert drain.target == "n1" and drain.reason == "lamplighter: GPU 3 uncorrectable ECC +2"
    requeue = next(a for a in actions if a.kind == "requeue")
    assert requeue.exclude_node == "n1" and requeue.start_at == 100.0 and requeue.group == "demo/g2"
    assert requeue.attempt == 1  # the attempt that failed: a second node asking for the same is skipped


def test_each_job_gets_its_own_restart_policy() -> None:
    other = LocalJob("18", "big", 0, 1, ((5151, 7),))
    ctx = Context(
        "n1",
        {"17": JOB, "18": other},
        total_nodes=4,
        restart={"17": RESTART, "18": RestartConfig(budget_per_group=20, backoff_initial_s=10, backoff_factor=1)},
    )
    events = [TrainerEvent("exit", j, 3, "x", code=1) for j in ("17", "18")]
    st, actions = decide(100.0, NodePolicyState(), events, CFG, ctx)
    # Attempt 3 spends job 17's budget of 3; job 18 (budget 20) is requeued after its own 10 s backoff.
    assert [(a.kind, a.target) for a in actions if a.kind in ("give_up", "requeue")] == [
        ("give_up", "17"),
        ("requeue", "18"),
    ]
    assert next(a for a in actions if a.kind == "requeue").start_at == 110.0
    assert st.jobs["17"].status == "given_up" and st.jobs["18"].handled_attempt == 3


def test_a_job_without_readable_settings_gets_the_default_policy() -> None:
    ctx = Context("n1", {"17": JOB}, total_nodes=4)  # nothing known about job 17's restart policy
    _, actions = decide(100.0, NodePolicyState(), [TrainerEvent("exit", "17", 9, "x", code=1)], CFG, ctx)
    assert RestartConfig().budget_per_group > 9
    assert [a.kind for a in actions] == ["kill_local", "requeue"]


def test_backoff_and_state_round_trip() -> None:
    st, actions = decide(100.0, NodePolicyState(), [TrainerEvent("exit", "17", 2, "x", code=1)], CFG, CTX)
    assert next(a for a in actions if a.kind == "requeue").start_at == 100.0 + 8.0  # 2 * 2**2
    assert NodePolicyState.from_json(st.to_json()) == st
    # The same observation again (next cycle): nothing new.
    _, again = decide(101.0, st, [TrainerEvent("exit", "17", 2, "x", code=1)], CFG, CTX)
    assert again == []


def test_hostlist() -> None:
    assert expand_hostlist("n[1-3,5],gpu07") == ["n1", "n2", "n3", "n5", "gpu07"]
    assert expand_hostlist("a[08-10]") == ["a08", "a09", "a10"]


def test_script_exclusions_last_one_wins_as_in_sbatch() -> None:
    from lamplighter.slurm.requeue import script_exclusions

    script = '#!/bin/bash\n#SBATCH --job-name="x"\n#SBATCH --exclude="n1"\n#SBATCH -x n[2-3]\nsrun true\n'
    assert script_exclusions(script) == ["n2", "n3"]
    assert script_exclusions("#SBATCH --exclude=n1\n# SBATCH --exclude=n9\n") == ["n1"]
    assert script_exclusions("#!/bin/bash\nsrun true\n") == []


# -- GPU faults: the README's "fault -> action" table, row by row ---------------------------------------------

MOVE_AND_DRAIN = ["kill_local", "drain", "requeue"]
RESTART_GROUP = ["kill_local", "requeue"]


@pytest.mark.parametrize(
    ("status", "kind", "problems", "want"),
    [
        ("fault", "ecc-uncorrectable", (), MOVE_AND_DRAIN),
        ("fault", "bad-pages", (), MOVE_AND_DRAIN),
        ("fault", "gpu-reset", (), MOVE_AND_DRAIN),  # a RAS reset
        ("fault", "lost", (), MOVE_AND_DRAIN),
        ("unresponsive", "probe-timeout", (), MOVE_AND_DRAIN),  # a hung GPU
        ("unresponsive", "init-timeout", (), MOVE_AND_DRAIN),
        ("fault", "ecc-deferred", (), MOVE_AND_DRAIN),
        ("fault", "xgmi", (), MOVE_AND_DRAIN),
        ("fault", "thermal", (), MOVE_AND_DRAIN),  # over the temperature limit
        ("fault", "a-kind-from-the-future", (), MOVE_AND_DRAIN),  # unknown kinds err on the hardware's side
        # A VM fault naming no process of a lamplighter job here: nobody restarts, the node keeps it in mind.
        ("fault", "vmfault", (), ["log"]),
        ("fault", "thermal-throttle", (), ["report"]),
        # Several problems on one GPU: the strongest answer.
        ("fault", "vmfault", ("vmfault", "thermal-throttle"), ["log"]),
        ("fault", "ecc-uncorrectable", ("ecc-uncorrectable", "vmfault"), MOVE_AND_DRAIN),
        ("unknown", "amdsmi-install", (), []),
        ("unknown", "probe-error", (), []),
        ("ok", "healthy", (), []),
    ],
)
def test_gpu_fault_to_action_table(status: str, kind: str, problems: tuple[str, ...], want: list[str]) -> None:
    _, actions = decide(100.0, NodePolicyState(), [GpuEvent(0, status, kind, f"GPU 0 {kind}", problems)], CFG, CTX)
    assert kinds(actions) == want


def test_a_vm_fault_of_the_groups_own_process_restarts_it() -> None:
    ev = GpuEvent(0, "fault", "vmfault", "GPU 0 vmfault", ("vmfault",), (4242,), ((4242, 1000),))
    _, actions = decide(100.0, NodePolicyState(), [ev], CFG, CTX)
    assert kinds(actions) == RESTART_GROUP


def vmfault(pid: int = 0, uid: int | None = None) -> GpuEvent:
    """A VM fault naming `pid` (0: none), whose uid the loop read from /proc (None: the process was gone)."""
    uids = ((pid, uid),) if pid and uid is not None else ()
    return GpuEvent(
        1, "fault", "vmfault", f"GPU 1 GPU VM fault (pid {pid:#x} python)", ("vmfault",), (pid,) if pid else (), uids
    )


def test_a_vm_fault_restarts_the_faulting_group_like_a_trainer_failure() -> None:
    other = LocalJob("18", "big", 0, 1, ((5151, 7),), uid=1002)
    slow = RestartConfig(backoff_initial_s=10, backoff_factor=1)
    ctx = Context("n1", {"17": JOB, "18": other}, total_nodes=4, restart={"17": RESTART, "18": slow})
    st, actions = decide(100.0, NodePolicyState(), [vmfault(pid=5151, uid=1002)], CFG, ctx)
    # Only job 18 owns pid 5151 (its cgroup's process); it is requeued after its backoff, off this node.
    assert [(a.kind, a.target) for a in actions] == [("kill_local", "18"), ("requeue", "18")]
    requeue = actions[1]
    assert requeue.start_at == 110.0 and requeue.exclude_node == "n1"  # job 18's own backoff
    assert "most often the application's own bug" in requeue.reason and requeue.jobs == (("18", "big/g0", 1),)
    assert st.vm_faults == ((100.0, "uid:1002"),) and st.jobs["18"].failures == (100.0,)
    # A pid of no lamplighter job here (another tenant's, a stray process): nobody restarts; the node counts it.
    st, actions = decide(100.0, NodePolicyState(), [vmfault(pid=999, uid=1003)], CFG, ctx)
    assert kinds(actions) == ["log"] and "nobody restarted" in actions[0].reason
    assert st.vm_faults == ((100.0, "uid:1003"),) and st.jobs == {}


def test_vm_faults_drain_only_when_they_repeat_across_different_users_within_the_window() -> None:
    cfg = NodeConfig(health={"vm_fault_drain_after": 3, "vm_fault_window_s": 1000})
    st = NodePolicyState()
    drained_at = []
    # One user's jobs fault three times, in three different jobs: their own kernels, the node is not drained.
    for i, t in enumerate((100.0, 200.0, 300.0)):
        job = LocalJob(f"1{i}", "demo", 2, 0, ((4242 + i, 99),), uid=1001)
        ctx = Context("n1", {job.job_id: job}, total_nodes=10)
        st, actions = decide(t, st, [vmfault(4242 + i, 1001)], cfg, ctx)
        assert "drain" not in kinds(actions)
    assert [j for _, j in st.vm_faults] == ["uid:1001"] * 3
    # Two more users' processes fault on the same node: three different users within 1000 s -> drain.
    for uid, t in ((1002, 400.0), (1003, 500.0)):
        job = LocalJob(str(uid), f"j{uid}", 0, 0, ((uid, 1),), uid=uid)
        st, actions = decide(t, st, [vmfault(uid, uid)], cfg, Context("n1", {str(uid): job}, total_nodes=10))
        if "drain" in kinds(actions):
            drained_at.append(t)
            drain = next(a for a in actions if a.kind == "drain")
            assert drain.reason.startswith(
                "lamplighter: GPU VM faults from 3 different users (uid:1001, uid:1002, uid:1003) within 1000 s"
            )
            assert kinds(actions) == ["kill_local", "drain", "requeue"]
    assert drained_at == [500.0] and st.vm_faults == ()


def test_vm_faults_outside_the_window_are_forgotten() -> None:
    cfg = NodeConfig(health={"vm_fault_drain_after": 2, "vm_fault_window_s": 100})
    st = NodePolicyState(vm_faults=((0.0, "uid:5"),))
    job = LocalJob("17", "demo", 2, 0, ((4242, 99),), uid=1001)
    st, actions = decide(150.0, st, [vmfault(4242, 1001)], cfg, Context("n1", {"17": job}, total_nodes=10))
    assert "drain" not in kinds(actions) and st.vm_faults == ((150.0, "uid:1001"),)
    # Within the window, a second user: drained (vm_fault_drain_after 2).
    other = LocalJob("18", "big", 0, 0, ((5151, 7),), uid=1002)
    _, actions = decide(200.0, st, [vmfault(5151, 1002)], cfg, Context("n1", {"18": other}, total_nodes=10))
    assert "drain" in kinds(actions)


def test_a_vm_fault_drain_keeps_the_rate_limit() -> None:
    cfg = NodeConfig(health={"vm_fault_drain_after": 1})
    job = LocalJob("17", "demo", 2, 1, ((4242, 99),), uid=1001)
    ctx = Context("n1", {"17": job}, drain_history=((0.0, "n2"),), total_nodes=4, restart={"17": RESTART})
    st, actions = decide(100.0, NodePolicyState(), [vmfault(4242, 1001)], cfg, ctx)
    assert kinds(actions) == ["kill_local", "log", "requeue"] and "NOT DRAINING" in actions[1].reason
    assert st.vm_faults == ((100.0, "uid:1001"),)  # not drained: the history is kept


def test_a_hang_with_in_job_restarts_kills_that_step_once_and_requeues_nothing() -> None:
    job = LocalJob(
        "17", "demo", 2, 1, ((1, 1), (2, 2), (3, 3)), steps={"0": ((1, 1),), "1": ((2, 2),), "batch": ((3, 3),)}
    )
    ctx = Context("n1", {"17": job}, total_nodes=4, restart={"17": RestartConfig(in_job=2)})
    hang = TrainerEvent("hang", "17", 1, "demo group 2 hung", step="0")
    st, actions = decide(100.0, NodePolicyState(), [hang], CFG, ctx)
    assert [(a.kind, a.pids) for a in actions] == [("kill_local", ((1, 1),))]
    assert "its step 0 only" in actions[0].reason
    _, again = decide(101.0, st, [hang], CFG, ctx)
    assert again == []  # once per step
    # Its successor hangs too: that step now (the agent's budget, then the exit path, decide the rest).
    _, next_step = decide(130.0, st, [TrainerEvent("hang", "17", 1, "hung", step="1")], CFG, ctx)
    assert [(a.kind, a.pids) for a in next_step] == [("kill_local", ((2, 2),))]
    # Without in-job restarts: the whole job here is killed and requeued, as before.
    plain = Context("n1", {"17": job}, total_nodes=4, restart={"17": RestartConfig(in_job=0)})
    _, actions = decide(100.0, NodePolicyState(), [hang], CFG, plain)
    assert kinds(actions) == ["kill_local", "requeue"] and actions[0].pids == job.pids


def test_vm_fault_history_round_trips_and_drops_junk() -> None:
    st = NodePolicyState(vm_faults=((1.5, "17"), (2.0, "18")))
    assert NodePolicyState.vm_faults_from_json(st.vm_faults_json()) == st.vm_faults
    assert NodePolicyState.vm_faults_from_json([[1, "a"], "junk", [None, "b"], [2]]) == ((1.0, "a"),)
    assert NodePolicyState.vm_faults_from_json(None) == ()


def test_renewals_before_the_time_limit_do_not_count_against_the_budget() -> None:
    """Slurm's restart count includes the group's own renewals (slurm/injob/renew.py): only failures spend the budget."""
    job = LocalJob("17", "demo", 2, 5, ((4242, 99),), renewals=4)
    ctx = Context("n1", {"17": job}, total_nodes=4, restart={"17": RESTART})  # budget 3
    renewed = TrainerEvent("exit", "17", 5, "exit 1", code=1, group="demo/g2", renewals=4)
    _, actions = decide(100.0, NodePolicyState(), [renewed], CFG, ctx)
    assert kinds(actions) == ["kill_local", "requeue"] and "restart 2/3" in actions[-1].reason
    failed = TrainerEvent("exit", "17", 5, "exit 1", code=1, group="demo/g2", renewals=0)
    _, actions = decide(100.0, NodePolicyState(), [failed], CFG, ctx)
    assert kinds(actions) == ["kill_local", "give_up"] and "after 5 restarts" in actions[-1].reason


def test_a_refused_drain_for_a_fault_that_stays_is_logged_once_per_repeat_interval() -> None:
    from lamplighter.supervisor.node_policy import REFUSAL_REPEAT_S

    # 1 of 4 nodes drained elsewhere just now: the limit refuses; the dead GPU is read again every cycle.
    ctx = Context("n1", {}, drain_history=((0.0, "n2"),), total_nodes=4)
    st, said = NodePolicyState(), []
    for i in range(20):
        st, actions = decide(1.0 + i * 0.5, st, [ECC], CFG, ctx)
        said += [a.reason for a in actions]
    assert len(said) == 1 and "NOT DRAINING n1" in said[0]
    _, actions = decide(1.0 + REFUSAL_REPEAT_S, st, [ECC], CFG, ctx)
    assert kinds(actions) == ["log"]  # said again after the interval: the refusal still stands


@pytest.mark.parametrize("kind", [*sorted(NODE_FAULT_ACTIONS), "a-kind-from-a-newer-check"])
def test_a_node_fault_drains_as_the_node_fault_table_says(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy reads policy/node_faults.py's table: a kind it maps to "none" is reported, never drained."""
    ev = NodeEvent(kind, f"{kind} on n1")
    _, acts = decide(10.0, NodePolicyState(), [ev], CFG, CTX)
    assert kinds(acts) == ["kill_local", "drain", "requeue"], acts
    monkeypatch.setitem(NODE_FAULT_ACTIONS, kind, "none")
    _, acts = decide(10.0, NodePolicyState(), [ev], CFG, CTX)
    assert "drain" not in kinds(acts) and "requeue" not in kinds(acts), acts
