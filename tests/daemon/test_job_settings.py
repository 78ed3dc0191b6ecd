"""Each job's settings come from its own job.json, read once per Slurm job; a bad file gets the defaults."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from lamplighter.configs.schema import HealthConfig, JobConfig
from lamplighter.daemon.job_settings import RETRY_S, JobSettingsCache, read_job_settings


def write(path: Path, doc: dict) -> str:  # type: ignore[type-arg]
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_jobs_health_restart_and_lighthouse(tmp_path: Path) -> None:
    job = JobConfig(
        name="j",
        health={"hang_timeout_s": 40, "progress": "lighthouse"},
        restart={"budget_per_group": 2},
        lighthouse={"port": 29510},
    )
    s = read_job_settings(write(tmp_path / "job.json", job.model_dump(mode="json")))
    assert s.error is None and s.health.hang_timeout_s == 40 and s.health.progress == "lighthouse"
    assert s.restart.budget_per_group == 2 and s.lighthouse == "http://127.0.0.1:29510"
    local = JobConfig(name="j", lighthouse={"port": 0})  # picks a free port: only lighthouse.json can say which
    assert read_job_settings(write(tmp_path / "local.json", local.model_dump(mode="json"))).lighthouse is None


def test_missing_or_invalid_config_gets_the_defaults_with_the_reason(tmp_path: Path) -> None:
    s = read_job_settings(str(tmp_path / "nope.json"))
    assert s.health == HealthConfig() and s.error is not None and "cannot read the file" in s.error
    assert read_job_settings(None).error == "its trainers carry no LAMPLIGHTER_CONFIG"
    bad = write(tmp_path / "bad.json", {"name": "j", "restart": {"budget_per_grup": 3}})
    s = read_job_settings(bad)
    assert s.error is not None and bad in s.error and "did you mean 'budget_per_group'" in s.error


def test_read_once_per_job_errors_logged_once_and_retried_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "job.json"
    good = JobConfig(name="j", health={"hang_timeout_s": 45}).model_dump(mode="json")
    cache = JobSettingsCache()
    with caplog.at_level(logging.ERROR):
        first = cache.get("7", str(path), 0.0)  # not there yet (the shared file system lags)
        write(path, good)
        again = cache.get("7", str(path), RETRY_S / 2)
    assert first.error and again is first
    assert sum(str(path) in r.getMessage() for r in caplog.records) == 1
    assert cache.get("7", str(path), RETRY_S + 1).health.hang_timeout_s == 45
    write(path, {"name": "changed", "health": {"hang_timeout_s": 99}})
    assert cache.get("7", str(path), 10 * RETRY_S).health.hang_timeout_s == 45  # a good read is kept
    cache.keep([])
    assert cache.known() == {}
