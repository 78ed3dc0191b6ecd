"""A job's checks in the node daemon, with the job's own settings and its owner's files."""

from __future__ import annotations

from pathlib import Path

from lamplighter.configs.schema import HealthConfig
from lamplighter.lighthouse.status import LighthouseStatus
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.stop_at import write_stop_at
from lamplighter.supervisor.node.job_settings import JobSettings
from lamplighter.supervisor.node.job_watch import JobWatch
from lamplighter.supervisor.node.trainers import NodeTrainer
from lamplighter.trainer.heartbeat import write_heartbeat


def no_lighthouse(address: str, timeout: float) -> LighthouseStatus:
    raise AssertionError("progress comes from heartbeat files here")


def test_a_group_at_the_step_its_owner_told_the_job_to_stop_at_is_finishing_not_hung(tmp_path: Path) -> None:
    """A job trained "until told" (trainer.steps far out, then stop-at): its groups' last step is the stop step,
    and shutting down there is given startup_timeout_s, as at trainer.steps, not hang_timeout_s."""
    # The fixed hang timeout: one heartbeat teaches no pace (test_progress_pace.py covers the learned limit).
    health = HealthConfig(progress="heartbeat", hang_timeout_s=5.0, startup_timeout_s=60.0, hang_pace_factor=0)
    settings = JobSettings(health=health, run_dir=str(tmp_path), target_step=1_000_000)
    watch = JobWatch("soak", str(tmp_path), settings, no_lighthouse, 0.5, Path("/proc"), dict)
    trainer = (10, 1, 5, "S", "soak", 2, "77", "0", 0)  # pid, ppid, start time, state, job, group, job id, step, rank
    # Slurm restart 1, its trainer's first attempt of it (contract.attempt_number: 100).
    watch.set_roots([NodeTrainer(*trainer, "n1", str(tmp_path), 1, 0, 0.0, 10, trainer_attempt=100)])
    write_heartbeat(RunPaths(tmp_path).heartbeat(2, 0), step=300, now=100.0, pid=10, attempt=100)
    assert [e.kind for e in watch.hangs(110.0)] == ["hang"]  # 10 s silent mid-run: hung
    write_stop_at(tmp_path, 300)
    assert watch.hangs(110.0) == []  # the same silence at the step it was told to stop at: finishing
    assert [e.kind for e in watch.hangs(161.0)] == ["hang"]  # a finish that never ends is still a hang
