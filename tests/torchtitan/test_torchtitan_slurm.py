"""The real torchtitan on the Slurm lab, through the scripts lamplighter renders: a short per-step job, in CI.

Two groups of one torchrun each; group 1's job is requeued after a few commits (as a node daemon does after a
fault). It starts again on its node with lamplighter's launch on its PYTHONPATH, heals from group 0 and commits
with the same state hash; every job ends COMPLETED. The job trains "until told": once group 1 has committed
again, the test writes the job's stop-at a few steps on (lamplighter's launch lowers torchtitan's
training.steps to it), so group 0 is surely still training when group 1 is back, however slow the requeue.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from realparts import require_slurm

from lamplighter.configs.loader import load_job
from lamplighter.lab.demo_torchtitan_slurm import lab_settings, titan_lab_job
from lamplighter.lab.e2e_run import LabRun
from lamplighter.lab.slurm_lab import SlurmLab, running_lab
from lamplighter.lab.testcluster import wait_until
from lamplighter.lab.torchtitan_env import TitanEnv
from lamplighter.rundir.contract import RunPaths, attempt_number
from lamplighter.rundir.steplog import StepRecord, read_steps
from lamplighter.rundir.stop_at import write_stop_at
from lamplighter.slurm.requeue import requeue_now

pytestmark = [pytest.mark.integration, pytest.mark.heavy(seconds=220)]


def run_steps(run_dir: Path, group: int) -> list[StepRecord]:
    return [r for r in read_steps(RunPaths(run_dir).steps(group)) if r.committed]


STEPS = 100_000  # far: the test ends the run through the job's stop-at
LEAD = 20  # steps past the highest when group 1 has committed again


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SlurmLab]:
    require_slurm()
    with running_lab(tmp_path / "lab", lab_settings(2), daemons=False) as lab:
        yield lab


def test_a_requeued_torchtitan_group_heals_on_slurm(titan_env: TitanEnv, lab: SlurmLab, tmp_path: Path) -> None:
    slurm_lab, port = lab, lab.job_port
    cfg = titan_lab_job(
        slurm_lab, tmp_path / "titan", mode="per-step", env_dir=titan_env.root, steps=STEPS, groups=2, port=port
    )
    path = tmp_path / "titan.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    run = LabRun(slurm_lab, load_job(path), path)
    sub = run.submit()
    run.wait_all_committing(timeout=300)
    wait_until(lambda: len(run.committed_steps(1)) >= 8, 240, "group 1 to commit 8 steps")
    requeue_now(run.api, sub.groups[1])
    requeued = attempt_number(1, 0)  # Slurm's first restart, no in-job restart
    wait_until(
        lambda: any(r.attempt >= requeued for r in run_steps(Path(sub.run_dir), 1)),
        300,
        "group 1 to commit again after its requeue",
    )
    steps = [r for g in (0, 1) for r in run_steps(Path(sub.run_dir), g)]
    end = max(r.trainer_step if r.trainer_step is not None else r.step for r in steps) + LEAD
    write_stop_at(Path(sub.run_dir), end)
    states = run.wait_end(420)
    assert set(states.values()) == {"COMPLETED"}, states
    report = run.report()
    assert report["reached_target"] and report["trainer_steps"] == end, report["groups"]
    assert report["steps_lost"] == 0 and report["weights_identical"] is True, report["weights_check"]
    attempts = {r.attempt for r in run_steps(Path(sub.run_dir), 1)}
    assert attempts == {0, requeued}, f"group 1 committed in attempts {attempts}: once before its requeue, once after"
    log = "\n".join(p.read_text() for p in (Path(sub.run_dir) / "logs").glob("g1-*.out"))
    assert "lamplighter: applying fix for torchft#347 on torchtitan 0.3.0" in log
