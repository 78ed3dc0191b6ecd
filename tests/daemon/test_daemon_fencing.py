"""Fencing on the node: processes of a run Slurm moved on from are killed, after a grace, and nothing else."""

from __future__ import annotations

from lamplighter.configs.schema import NodeConfig
from lamplighter.supervisor.node.fencing import StaleWatch
from lamplighter.supervisor.node_policy import Context, JobTrack, LocalJob, NodePolicyState, TrainerEvent, decide


def test_stale_only_after_the_grace_and_forgotten_when_it_clears() -> None:
    w = StaleWatch(grace_s=5.0)
    moved = {"17": "job 17 runs on n3, not on n1"}
    assert w.judge(100.0, moved) == []  # Slurm may still be killing a requeued job's processes
    assert w.judge(104.0, moved) == []
    [(job, why)] = w.judge(105.0, moved)
    assert job == "17" and "runs on n3" in why and "stale for 5.0 s" in why
    # Slurm unreadable this time (or the processes gone): nothing is judged, the clock restarts.
    assert w.judge(106.0, {}) == [] and w.since == {}


def test_a_stale_run_is_killed_here_without_a_requeue_or_a_failure_counted() -> None:
    local = LocalJob("17", "demo", 2, 1, ((4242, 99),))
    ctx = Context("n1", {"17": local}, total_nodes=4)
    stale = ((555, 10), (556, 11))  # the earlier run's processes: not adopted, named by the event itself
    ev = TrainerEvent("stale", "17", -1, "started before the job's current run", group="demo/g2", pids=stale)
    state = NodePolicyState({"17": JobTrack(0)})
    new, actions = decide(100.0, state, [ev], NodeConfig(), ctx)
    assert [(a.kind, a.pids) for a in actions] == [("kill_local", stale)]
    assert actions[0].reason.startswith("FENCED: ") and new.jobs["17"] == JobTrack(0)
    # No process named: nothing to kill (never the job's current processes).
    _, none = decide(100.0, state, [TrainerEvent("stale", "17", -1, "old")], NodeConfig(), ctx)
    assert none == []
