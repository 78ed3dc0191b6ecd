"""validate reads the comm timeouts a torchtitan job's config module sets (parsed, never imported) and
refuses ones a torchft wait would outlast, naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lamplighter.commands.cli import main
from lamplighter.configs.torchtitan_module import comm_timeouts

MODULE = "llama3_8b_ft.py"


def init_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    job = tmp_path / "job.yaml"
    assert main(["init", "--torchtitan", "--name", "llama", str(job)]) == 0
    capsys.readouterr()
    return job


def test_the_module_init_writes_is_read_and_its_timeouts_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = init_job(tmp_path, capsys)
    assert main(["validate", str(job)]) == 0
    out = capsys.readouterr().out
    assert f"torchtitan  {MODULE}: train_timeout_seconds 150 s (needs > " in out and "init_timeout_seconds 400 s" in out


def test_a_module_timeout_a_torchft_wait_outlasts_is_an_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = init_job(tmp_path, capsys)
    module = tmp_path / MODULE
    module.write_text(module.read_text().replace("init_timeout_seconds=400", "init_timeout_seconds=300"))
    assert main(["validate", str(job)]) == 2
    err = capsys.readouterr().err
    assert f"{module} sets init_timeout_seconds=300 s, but a rank can wait" in err and "set it to" in err
    assert main(["validate", "--json", str(job)]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False and "init_timeout_seconds=300" in doc["errors"][0]["message"]


def test_a_module_not_found_is_a_warning_that_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = init_job(tmp_path, capsys)
    (tmp_path / MODULE).unlink()
    assert main(["validate", str(job)]) == 0
    err = capsys.readouterr().err
    assert "--module=llama3_8b_ft: no llama3_8b_ft.py beside the job or on trainer.env PYTHONPATH" in err
    assert str(tmp_path) in err


def test_only_literal_numbers_in_the_config_functions_call_are_taken() -> None:
    source = """
from torchtitan.config import CommConfig
def other():
    return CommConfig(init_timeout_seconds=5)
def mine():
    return Trainer.Config(comm=CommConfig(init_timeout_seconds=600, train_timeout_seconds=LIMIT))
"""
    assert comm_timeouts(source, "mine") == {"comm.init_timeout_seconds": 600}
    assert comm_timeouts(source, None) == {}  # two calls and no function named: which one is unknown
    assert comm_timeouts("import os\nos.system('no')\n", "mine") == {}  # parsed, never run
