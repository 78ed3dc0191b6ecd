"""job.json carries its format version, and every reader of it takes a version it knows (or none) and refuses
the rest: the trainer, the in-job agent, the loader behind `validate`/`why`/`status`, the daemon (tests/daemon)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lamplighter.configs.job_file import (
    FORMAT_KEY,
    FORMAT_VERSION,
    JobFileVersionError,
    job_file_doc,
    job_file_json,
    load_job_file,
    parse_job_file,
)
from lamplighter.configs.loader import ConfigError, load_job
from lamplighter.configs.schema import JobConfig
from lamplighter.rundir import contract
from lamplighter.slurm.injob.agent import load_config
from lamplighter.trainer.main import load_job as trainer_load_job
from lamplighter.trainer.main import main as trainer_main

JOB = JobConfig(name="j", health={"hang_timeout_s": 600, "startup_timeout_s": 1200})


def write(path: Path, doc: dict) -> Path:  # type: ignore[type-arg]
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_the_file_carries_its_version_first_and_reads_back_as_the_same_job(tmp_path: Path) -> None:
    doc = job_file_doc(JOB)
    assert next(iter(doc)) == FORMAT_KEY and doc[FORMAT_KEY] == FORMAT_VERSION == 1
    assert json.loads(job_file_json(JOB)) == doc
    path = write(tmp_path / "job.json", doc)
    assert load_job_file(path) == JOB == parse_job_file(path.read_text(), str(path))


def test_every_reader_takes_a_versioned_file_and_one_from_before_versions(tmp_path: Path) -> None:
    for name, doc in (("v1.json", job_file_doc(JOB)), ("old.json", JOB.model_dump(mode="json"))):
        path = write(tmp_path / name, doc)
        assert trainer_load_job(str(path)) == JOB, name  # the trainer, through LAMPLIGHTER_CONFIG
        assert load_config(str(path)) == JOB, name  # the in-job agent, as the job's user
        assert load_job(path) == JOB, name  # validate, why and status given the file


def test_an_unknown_version_is_refused_by_every_reader_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path / "job.json", {**job_file_doc(JOB), FORMAT_KEY: FORMAT_VERSION + 1})
    for read in (
        load_job_file,
        lambda p: parse_job_file(p.read_text(), str(p)),
        load_job,
        lambda p: load_config(str(p)),
    ):
        with pytest.raises(JobFileVersionError) as e:
            read(path)
        assert f"format version {FORMAT_VERSION + 1}" in str(e.value) and isinstance(e.value, ConfigError)
    # With the line, where a person reads it (the key is on line 2 of an indented file).
    with pytest.raises(JobFileVersionError) as e:
        parse_job_file(path.read_text(), str(path))
    assert e.value.problems[0].line == 2 and e.value.problems[0].key == FORMAT_KEY
    for odd in (True, "1", 1.0, None):
        with pytest.raises(JobFileVersionError, match="not an integer"):
            load_job_file(write(tmp_path / "odd.json", {**job_file_doc(JOB), FORMAT_KEY: odd}))


def test_the_trainer_refuses_a_newer_file_and_asks_for_no_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "job.json", {**job_file_doc(JOB), FORMAT_KEY: FORMAT_VERSION + 1})
    monkeypatch.delenv(contract.ENV_CONFIG, raising=False)
    for var in [k for k in os.environ if k.startswith("LAMPLIGHTER_")]:
        monkeypatch.delenv(var)
    assert trainer_main(["--config", str(path)]) == contract.EXIT_NO_RESTART
    captured = capsys.readouterr()
    assert f"format version {FORMAT_VERSION + 1}" in captured.out + captured.err
