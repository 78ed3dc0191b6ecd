"""The job make scale runs on its Slurm lab is a valid lamplighter job whose trainer is the torch-free replica."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from lamplighter.configs.schema import JobConfig
from lamplighter.slurm.submit.render import render_job


@pytest.fixture
def sg(bench: ModuleType) -> ModuleType:
    return importlib.import_module("bench.scale_groups")


def test_the_scale_job_validates_and_renders_one_replica_per_group_on_the_heads_address(
    tmp_path: Path, sg: ModuleType
) -> None:
    doc = sg.job_config(tmp_path / "run", 64, "n1", "10.77.0.11", 29600, tmp_path / "slurm.conf")
    job = JobConfig.model_validate(doc)  # hang_timeout_s above torchft's longest wait, among the rest
    assert job.health.progress == "lighthouse" and job.restart.in_job == 0
    scripts = render_job(job, tmp_path / "scripts", python="/opt/py/bin/python")
    group = (tmp_path / "scripts" / "group-7.sbatch").read_text()
    assert "lamplighter.lab.scale_replica" in group and "--groups \\\n    7" in group
    assert '--exclude="n1"' in group
    lighthouse = (tmp_path / "scripts" / "lighthouse.sbatch").read_text()
    assert "--bind 10.77.0.11:29600" in lighthouse and '--nodelist="n1"' in lighthouse
    assert len(scripts) == 65
