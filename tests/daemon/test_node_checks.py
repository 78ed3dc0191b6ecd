"""The node's own checks in the daemon: a training link down or too few GPUs drains the node with the reason,
and a node the daemon drained comes back once its checks have passed for a while; a relapse waits for a person."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_node import BTIME, NODE, Clock, FakeNode
from netns_links import NetnsLinks, ip

from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.node.auto_resume import marked_at
from lamplighter.supervisor.node.loop import CLUSTER_VIEW_S


def gpus(n: int) -> list[GpuObservation]:
    return [GpuObservation(i, "ok", "healthy", f"GPU {i} healthy", {}) for i in range(n)]


def acted(node: FakeNode, seconds: float, step_s: float = 1.0) -> list[tuple[str, str]]:
    """(action, reason) of every line the daemon wrote to its action log while running this long."""
    start = len(node.lines)
    node.run(seconds, step_s=step_s)
    return [(o["action"], o["reason"]) for o in map(json.loads, node.lines[start:])]


@pytest.fixture
def counted(tmp_path: Path) -> Iterator[FakeNode]:
    n = FakeNode(
        tmp_path,
        gpu_count=8,
        max_drain_fraction=1.0,
        auto_resume={"passes": 3, "over_s": 60.0, "relapse_hold_s": 3600.0},
    )
    n.gpus.steady = gpus(8)
    try:
        yield n
    finally:
        n.close()
        n.remove()


def test_fewer_gpus_drain_and_the_node_comes_back_after_its_passes_and_a_relapse_is_held(counted: FakeNode) -> None:
    node = counted
    assert acted(node, 10) == []
    node.gpus.steady = gpus(7)  # one fell off the bus and is gone from amdsmi's list
    [(kind, reason)] = acted(node, 3)
    assert kind == "drain" and "7 of 8 GPUs found" in reason and reason.startswith("lamplighter: ")
    assert node.slurm.node(NODE).is_drained
    assert acted(node, 120) == []  # still 7: no pass counts
    node.gpus.steady = gpus(8)  # replaced
    back = acted(node, 59)
    assert back == []  # passes spread over 60 s: not yet
    [(kind, reason)] = acted(node, 60)
    assert kind == "resume" and "checks passed" in reason and "7 of 8 GPUs found" in reason
    assert not node.slurm.node(NODE).is_drained
    # It fails again 5 minutes later: drained, and at once held for a person, however long the checks then pass.
    assert acted(node, 300) == []
    node.gpus.steady = gpus(7)
    relapse = acted(node, 3)
    assert [k for k, _ in relapse] == ["drain", "drain"], relapse
    assert "held for a person: drained again 6 min after" in relapse[1][1] and "7 of 8 GPUs" in relapse[1][1]
    node.gpus.steady = gpus(8)
    assert acted(node, 400) == []
    assert node.slurm.node(NODE).is_drained and "held for a person" in (node.slurm.node(NODE).reason or "")


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("amdsmi-install", "amdsmi missing: no module named 'amdsmi'"),
        ("probe-error", "amdsmi_init failed: AMDSMI_STATUS_DRIVER_NOT_LOADED"),
        ("starting", "probe worker starting"),
    ],
)
def test_gpu_health_unknown_drains_nothing_whatever_gpu_count_says(counted: FakeNode, kind: str, why: str) -> None:
    """amdsmi missing or broken, or its worker starting: the check reads no GPU (one worker, GPU 0's, says why),
    so the count is unknown, not 1 of 8 (deploy/README.md: amdsmi missing is never a drain)."""
    node = counted
    node.gpus.steady = [GpuObservation(0, "unknown", kind, f"GPU 0 health unknown: {why}", {})]
    assert acted(node, 30) == []
    assert not node.slurm.node(NODE).is_drained
    # Once amdsmi reads the GPUs, a short count is a fault again.
    node.gpus.steady = [*gpus(7)]
    [(action, reason)] = acted(node, 3)
    assert action == "drain" and "7 of 8 GPUs found" in reason


def test_an_admins_drain_is_never_resumed(counted: FakeNode) -> None:
    node = counted
    node.slurm.drain(NODE, "maintenance: new DIMMs (alice)")
    assert acted(node, 400, step_s=5.0) == []
    assert node.slurm.node(NODE).is_drained


def test_a_real_link_taken_down_drains_naming_it_and_the_node_resumes_once_it_is_back(
    tmp_path: Path, netns: str
) -> None:
    node = FakeNode(
        tmp_path,
        links=NetnsLinks(netns, ("lla0",)),
        network={"interfaces": ["lla0"]},
        max_drain_fraction=1.0,
        auto_resume={"passes": 2, "over_s": 20.0},
    )
    node.gpus.steady = gpus(2)
    try:
        assert acted(node, 10, step_s=5.0) == []
        ip(netns, "link", "set", "llb0", "down")  # the far end goes: lla0 loses its carrier
        [(kind, reason)] = acted(node, 5, step_s=5.0)
        assert kind == "drain" and "link lla0" in reason and "down" in reason
        assert acted(node, 30, step_s=5.0) == []  # still down: no pass counts
        ip(netns, "link", "set", "llb0", "up")
        [(kind, reason)] = acted(node, 40, step_s=5.0)
        assert kind == "resume" and "link lla0" in reason
        assert not node.slurm.node(NODE).is_drained
    finally:
        node.close()
        node.remove()


def test_a_fault_that_stays_on_a_drained_node_does_not_ask_slurm_for_every_node_each_cycle(counted: FakeNode) -> None:
    node = counted
    asked = []
    nodes = node.slurm.nodes
    node.slurm.nodes = lambda: asked.append(1) or nodes()  # type: ignore[method-assign]
    node.gpus.steady = gpus(7)
    [(kind, _)] = acted(node, 3, step_s=0.5)
    assert kind == "drain"
    asked.clear()
    assert acted(node, 120, step_s=0.5) == []  # 240 cycles that each see the missing GPU
    assert 0 < len(asked) <= 120 / CLUSTER_VIEW_S + 1, len(asked)


def test_resumes_are_rate_limited_across_the_cluster_by_the_marks_the_daemons_leave(tmp_path: Path) -> None:
    cfg = {"max_drain_fraction": 0.5, "drain_window_s": 3600.0, "gpu_count": 8,
           "auto_resume": {"passes": 2, "over_s": 20.0, "relapse_hold_s": 60.0}}  # fmt: skip
    clock = Clock(BTIME + 10.0)
    slurm = FakeSlurm(["n1", "n2", "n3", "n4"], clock=clock)  # 2 of 4 nodes per hour
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = FakeNode(tmp_path / "a", slurm=slurm, clock=clock, **cfg)
    second = FakeNode(tmp_path / "b", name="n2", slurm=first.slurm, clock=first.clock, **cfg)
    try:
        for n in (first, second):
            n.gpus.steady = gpus(8)
        # Another daemon resumed n3 a minute ago: its mark is in n3's Comment.
        first.slurm.drain("n3", "lamplighter: GPU 1 lost")
        first.slurm.resume("n3", f"lamplighter: resumed at {int(first.clock.t - 60)} (earlier)")
        first.gpus.steady = second.gpus.steady = gpus(7)
        drains = [(o["action"], o["target"]) for o in first.run(3, each=second.loop.cycle)]
        second_drains = [o for o in map(json.loads, second.lines) if o["action"] == "drain"]
        assert drains == [("drain", "n1")] and len(second_drains) == 1
        first.gpus.steady = second.gpus.steady = gpus(8)
        start = len(first.lines), len(second.lines)
        first.run(120, each=second.loop.cycle)
        said = [json.loads(x) for x in first.lines[start[0] :]] + [json.loads(x) for x in second.lines[start[1] :]]
        resumed = [o["target"] for o in said if o["action"] == "resume"]
        refused = [o for o in said if o["action"] == "report" and "resume refused" in o["reason"]]
        assert len(resumed) == 1, said  # n3's mark and the first resume fill the limit of 2
        assert len(refused) == 1 and "resume limit reached: 2 of 4 nodes resumed" in refused[0]["reason"], said
        late = "n2" if resumed == ["n1"] else "n1"
        assert first.slurm.node(late).is_drained
        assert marked_at(first.slurm.node(resumed[0]).fields.get("Comment")) is not None
        # An hour after n3's mark, the other node comes back too.
        first.run(3600, step_s=10.0, each=second.loop.cycle)
        assert not first.slurm.node(late).is_drained
    finally:
        for n in (first, second):
            n.close()
            n.remove()


def test_an_automatic_resume_keeps_an_admins_node_comment(counted: FakeNode) -> None:
    node = counted
    node.slurm.set_comment(NODE, "rack 7: PSU swapped (alice)")
    node.gpus.steady = gpus(7)
    assert [k for k, _ in acted(node, 3)] == ["drain"]
    node.gpus.steady = gpus(8)
    assert [k for k, _ in acted(node, 120)] == ["resume"]
    assert node.slurm.node(NODE).fields.get("Comment") == "rack 7: PSU swapped (alice)"
