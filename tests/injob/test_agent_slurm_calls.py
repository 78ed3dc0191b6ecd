"""The in-job agent asks Slurm through the one Slurm call function and its parser, never a regex of its own."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lamplighter.slurm.injob.agent import slurm_restarts
from lamplighter.slurm.parsers import parse_scontrol_job

RECORDED = Path(__file__).resolve().parents[1] / "slurm" / "recorded"


def _scontrol(tmp_path: Path, body: str) -> Path:
    """A stand-in scontrol first on PATH: prints a recorded answer, or fails as slurmctld down does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir


@pytest.mark.parametrize("recorded", ["scontrol_o_show_job_running.txt", "scontrol_show_job_requeued_running.txt"])
def test_the_restart_count_is_the_parsers(recorded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (RECORDED / recorded).read_text()
    bin_dir = _scontrol(tmp_path, f"cat '{RECORDED / recorded}'\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert slurm_restarts("17") == parse_scontrol_job(text).restarts


def test_a_slurm_that_does_not_answer_or_a_bad_job_id_gives_no_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = _scontrol(tmp_path, "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert slurm_restarts("17") is None
    assert slurm_restarts("17; rm -rf /") is None and slurm_restarts(None) is None
