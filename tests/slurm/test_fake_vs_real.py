"""One scenario run on FakeSlurm and on the real cluster: the fake behaves like Slurm where it matters."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from slurm_jobs import group_script

from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.slurm.actions import SlurmActions, SlurmApi, poll_job
from lamplighter.slurm.requeue import requeue_now, start_elsewhere, updater_for
from lamplighter.slurm.run import SlurmError

WAIT = 60.0


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.integration)])
def world(request: pytest.FixtureRequest) -> tuple[SlurmApi, Callable[[str], None]]:
    """The Slurm API and how to crash a node, for the fake or the real cluster."""
    if request.param == "fake":
        fake = FakeSlurm(["n1", "n2", "n3"])
        return fake, fake.crash_node
    cluster = request.getfixturevalue("clean_slurm_cluster")
    return SlurmActions(cluster.cli()), cluster.crash_node


def test_requeue_drain_mark_down_cancel(world: tuple[SlurmApi, Callable[[str], None]], tmp_path: Path) -> None:
    api, crash_node = world
    script, _ = group_script(tmp_path, name="fvr")
    jid = api.submit(script)
    running: Callable[[int], Callable[..., bool]] = lambda n: lambda j: j.running and j.restarts == n  # noqa: E731
    job = poll_job(api, jid, running(0), WAIT, "RUNNING")
    assert job.name == "ll-fvr-g0" and job.requeue
    assert [(e.job_id, e.state) for e in api.jobs(name_prefix="ll-fvr-")] == [(jid, "RUNNING")]
    mine = lambda: [(i.name, i.state, i.restarts) for i in api.all_jobs("ll-fvr-") if i.job_id == jid]  # noqa: E731
    assert mine() == [("ll-fvr-g0", "RUNNING", 0)]

    # Requeued, the job waits for BeginTime until start_now.
    api.requeue(jid)
    # Slurm shows Reason=None for a moment before its scheduler names the BeginTime hold.
    pending = poll_job(api, jid, lambda j: j.pending and j.reason == "BeginTime", WAIT, "PENDING on BeginTime")
    assert (pending.restarts, pending.node_list) == (1, None)
    # Away from the node it ran on: Slurm revoked the job's credential there, and a start on it fails
    # at once ("credential revoked": FAILED for good). CI hit that when Slurm picked the same node.
    start_elsewhere(api, updater_for(api), jid, job.node_list, 0)
    first = poll_job(api, jid, running(1), WAIT, "RUNNING again").node_list
    assert first is not None

    # A drained node takes no requeued job.
    api.drain(first, "fvr: bad gpu")
    assert api.node(first).is_drained and api.node(first).reason == "fvr: bad gpu"
    requeue_now(api, jid)
    second = poll_job(api, jid, running(2), WAIT, "RUNNING off the drained node").node_list
    assert second not in (None, first)

    # Its node dies; a watcher marks it down at once: requeued, off that node too.
    crash_node(second)
    api.mark_down(second, "fvr: node silent")
    assert api.node(second).is_down
    api.start_now(jid)
    third = poll_job(api, jid, running(3), WAIT, "RUNNING off the down node").node_list
    assert third not in (None, first, second)

    api.resume(first)
    assert not api.node(first).is_drained and "Comment" not in api.node(first).fields
    # An automatic resume leaves its mark in the node's Comment, exactly as given (spaces and all).
    api.drain(first, "fvr: bad gpu again")
    mark = "lamplighter: resumed at 1764230000 (2025-11-27T07:53:20Z)"
    api.resume(first, mark)
    assert not api.node(first).is_drained and api.node(first).fields.get("Comment") == mark
    assert {n.name: n.fields.get("Comment") for n in api.nodes()}[first] == mark
    with pytest.raises(ValueError, match="one line"):
        api.resume(first, "lamplighter: resumed at 1\nState=DOWN")
    # A batch with a job Slurm does not know answers for the others; a batch of only such jobs is an error.
    assert set(api.jobs_by_id([jid, 987654])) == {jid}
    with pytest.raises(SlurmError, match="Invalid job id"):
        api.jobs_by_id([987654])
    api.cancel(jid)
    poll_job(api, jid, lambda j: j.state == "CANCELLED", WAIT, "CANCELLED")
    assert mine() == [("ll-fvr-g0", "CANCELLED", 3)]  # an ended job too, for MinJobAge
    with pytest.raises(SlurmError, match="Invalid job id"):
        api.job(987654)
    with pytest.raises(SlurmError, match="not found"):
        api.node("n99")
