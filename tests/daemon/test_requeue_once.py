"""A multi-node group is requeued once per failed attempt, however many of its nodes' daemons ask."""

from __future__ import annotations

from pathlib import Path

from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.rundir.actions import ActionLog
from lamplighter.slurm.requeue import requeue_job
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.node_policy import NodeAction
from lamplighter.supervisor.state_store import DaemonState


class Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


def two_node_job(tmp_path: Path, slurm: FakeSlurm) -> int:
    script = tmp_path / "g1.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=ll-llama-g1\n#SBATCH --nodes=2\n")
    return slurm.submit(script)


def daemon(tmp_path: Path, node: str, slurm: FakeSlurm, clock: Clock) -> Executor:
    return Executor(DaemonState.load(tmp_path / node), slurm, None, ActionLog(node, lambda line: None), clock=clock)


def requeue(node: str, job: int, attempt: int, clock: Clock) -> NodeAction:
    return NodeAction(
        "requeue", str(job), f"hang seen from {node}", start_at=clock.t, exclude_node=node, attempt=attempt
    )


def test_both_nodes_see_the_hang_one_requeue_happens(tmp_path: Path) -> None:
    clock = Clock()
    slurm = FakeSlurm(["n1", "n2", "n3", "n4"], clock=clock)
    job = two_node_job(tmp_path, slurm)
    assert slurm.job(job).node_list == "n1,n2"
    a, b = daemon(tmp_path, "n1", slurm, clock), daemon(tmp_path, "n2", slurm, clock)
    try:
        [first] = a.execute(clock.t, [requeue("n1", job, 0, clock)])
        assert first["requeue"].startswith("requeued from RUNNING") and slurm.job(job).restarts == 1
        assert slurm.job(job).state == "RUNNING"  # started again at once: attempt 1 is training
        clock.t += 0.5
        [second] = b.execute(clock.t, [requeue("n2", job, 0, clock)])
        assert second["outcome"] == "ok" and second["requeue"].startswith("already requeued by another")
        assert "start" not in second  # the placement is the first requeuer's
        info = slurm.job(job)
        assert (info.restarts, info.state) == (1, "RUNNING")  # attempt 1 was not killed
        # A failure of attempt 1 is a new failure: requeued again.
        [third] = b.execute(clock.t, [requeue("n2", job, 1, clock)])
        assert third["requeue"].startswith("requeued") and slurm.job(job).restarts == 2
    finally:
        a.state.close()
        b.state.close()


def test_requeue_job_skips_only_when_slurm_is_past_the_attempt(tmp_path: Path) -> None:
    clock = Clock()
    slurm = FakeSlurm(["n1", "n2", "n3"], clock=clock)
    job = two_node_job(tmp_path, slurm)
    assert requeue_job(slurm, job, attempt=0) == "requeued from RUNNING"
    # Still pending (its BeginTime not lifted yet): asked again for the same attempt, nothing happens.
    assert requeue_job(slurm, job, attempt=0).startswith("already requeued by another (Slurm restart count 1")
    assert slurm.job(job).restarts == 1
    assert requeue_job(slurm, job) == "already PENDING"  # without an attempt: the old answer
