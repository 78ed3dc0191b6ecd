"""Fencing on the node: trainers of an attempt Slurm moved on from are killed, after a grace, and nothing else."""

from __future__ import annotations

from lamplighter.configs.schema import NodeConfig
from lamplighter.daemon.fencing import Here, StaleWatch, stale_reason
from lamplighter.daemon.node_policy import Context, JobTrack, LocalJob, NodePolicyState, TrainerEvent, decide
from lamplighter.slurm.parsers import JobInfo

HERE = Here("17", 1, "demo/g2")


def info(state: str = "RUNNING", restarts: int = 1, nodes: str | None = "n1") -> JobInfo:
    return JobInfo(17, "ll-demo-g2", state, None, restarts, nodes, nodes, None, True, None)


def test_what_makes_an_attempt_stale() -> None:
    assert stale_reason("n1", HERE, info()) is None  # the current attempt, here
    assert stale_reason("n1", HERE, info(nodes="n[1-2]")) is None  # a multi-node group with this node
    assert "Slurm is at attempt 2, they run attempt 1 on n1" in (stale_reason("n1", HERE, info(restarts=2)) or "")
    assert "runs on n3, not n1" in (stale_reason("n1", HERE, info(nodes="n3")) or "")
    assert "is PENDING" in (stale_reason("n1", HERE, info(state="PENDING", nodes=None)) or "")


def test_stale_only_after_the_grace_and_forgotten_when_it_clears() -> None:
    w = StaleWatch(grace_s=5.0)
    moved = {"17": info(restarts=2, nodes="n3")}
    assert w.judge(100.0, "n1", [HERE], moved) == []  # Slurm may still be killing a requeued job's processes
    assert w.judge(104.0, "n1", [HERE], moved) == []
    [(h, why)] = w.judge(105.0, "n1", [HERE], moved)
    assert h == HERE and "stale for 5.0 s" in why
    # Slurm unreadable this time: nothing is judged, the clock restarts.
    assert w.judge(106.0, "n1", [HERE], {}) == [] and w.since == {}


def test_a_stale_attempt_is_killed_here_without_a_requeue_or_a_failure_counted() -> None:
    local = LocalJob("17", "demo", 2, 1, ((4242, 99),))
    ctx = Context("n1", {"17": local}, total_nodes=4)
    ev = TrainerEvent("stale", "17", 1, "restarted since", group="demo/g2")
    # Slurm requeued it (the node was cut off), not this daemon.
    state = NodePolicyState({"17": JobTrack(0)})
    new, actions = decide(100.0, state, [ev], NodeConfig(), ctx)
    assert [(a.kind, a.pids) for a in actions] == [("kill_local", ((4242, 99),))]
    assert actions[0].reason.startswith("FENCED: ") and new.jobs["17"] == JobTrack(0)
    # Another attempt than the one running here now: nothing to kill.
    _, none = decide(100.0, state, [TrainerEvent("stale", "17", 0, "old")], NodeConfig(), ctx)
    assert none == []
    # This daemon requeued that attempt itself: it killed its trainers then.
    _, mine = decide(100.0, NodePolicyState({"17": JobTrack(1)}), [ev], NodeConfig(), ctx)
    assert mine == []
