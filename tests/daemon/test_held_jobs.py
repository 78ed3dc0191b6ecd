"""A job Slurm held after a failed launch is released by the head (soak finding, slurmctld-restart).

Killed while launching two groups, the controller came back, their launches
failed, and Slurm requeued both and held them: "launch failed requeued held"
until someone runs `scontrol release`. Nobody did, and two of three groups
never came back.
"""

from __future__ import annotations

from pathlib import Path

from lamplighter.configs.schema import NodeConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.rundir.actions import ActionLog
from lamplighter.slurm.parsers import parse_squeue
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.head.held_jobs import held_after_failed_launch, to_release
from lamplighter.supervisor.head.loop import HeadLoop
from lamplighter.supervisor.state_store import DaemonState

RECORDED = Path(__file__).parents[1] / "slurm" / "recorded"


class Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_held_jobs_of_a_recorded_queue_are_found() -> None:
    queue = parse_squeue((RECORDED / "squeue_launch_failed_requeued_held.txt").read_text())
    assert [e.job_id for e in queue if held_after_failed_launch(e)] == [3, 2]
    assert to_release(100.0, queue, {}) == [3, 2]
    assert to_release(100.0, queue, {3: 95.0}) == [2]  # released 5 s ago: not again yet
    assert to_release(100.0, queue, {3: 90.0}) == [3, 2]


def test_the_head_releases_a_group_held_after_a_failed_launch(tmp_path: Path) -> None:
    clock = Clock()
    slurm = FakeSlurm(["n1", "n2"], clock=clock)
    script = tmp_path / "g0.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=ll-soak-g0\n#SBATCH --requeue\n")
    job = slurm.submit(script)
    slurm.fail_launch(job)
    assert slurm.job(job).state == "PENDING"
    cfg = NodeConfig.model_validate({"role": "head", "state_dir": str(tmp_path / "state")})
    executor = Executor(DaemonState.load(tmp_path / "head"), slurm, None, ActionLog("head", lambda line: None))
    head = HeadLoop(cfg, slurm, executor, clock, tmp_path / "logs")
    head.cycle()
    assert slurm.job(job).state == "RUNNING"
    assert head.released == {job: clock.t}
