"""Each job's settings come from its own job.json, read once per Slurm job and owner; a bad file gets the defaults.

The file must be a small regular file of the job's owner: a link, a FIFO, /dev/zero, a sparse giant or
another user's file gets the defaults and the reason, at once and without echoing what it holds."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from lamplighter.configs.job_file import FORMAT_KEY, FORMAT_VERSION, job_file_doc
from lamplighter.configs.schema import HealthConfig, JobConfig
from lamplighter.supervisor.node.job_settings import (
    RETRY_S,
    JobSettings,
    JobSettingsCache,
    fallback,
    read_job_settings,
    settings_notice,
)

ME = os.getuid()


def write(path: Path, doc: dict) -> str:  # type: ignore[type-arg]
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_jobs_health_restart_and_lighthouse(tmp_path: Path) -> None:
    job = JobConfig(
        name="j",
        health={"hang_timeout_s": 40, "progress": "lighthouse"},
        restart={"budget_per_group": 2},
        lighthouse={"host": "10.9.0.1", "port": 29510},
        slurm={"head_node": "n1"},
    )
    s = read_job_settings(write(tmp_path / "job.json", job.model_dump(mode="json")), ME)
    assert s.error is None and s.health.hang_timeout_s == 40 and s.health.progress == "lighthouse"
    assert s.restart.budget_per_group == 2 and s.lighthouse == "http://10.9.0.1:29510"
    local = JobConfig(name="j", lighthouse={"port": 0})  # picks a free port: only lighthouse.json can say which
    assert read_job_settings(write(tmp_path / "local.json", local.model_dump(mode="json")), ME).lighthouse is None


def test_missing_or_invalid_config_gets_the_defaults_with_the_reason(tmp_path: Path) -> None:
    s = read_job_settings(str(tmp_path / "nope.json"), ME)
    assert s.health == HealthConfig() and s.error == "no such file"
    assert read_job_settings(None, ME).error == "its trainers carry no LAMPLIGHTER_CONFIG"
    bad = write(tmp_path / "bad.json", {"name": "j", "restart": {"budget_per_grup": "SECRET-VALUE"}})
    s = read_job_settings(bad, ME)
    assert s.error is not None and "restart.budget_per_grup" in s.error and "SECRET-VALUE" not in s.error


def test_only_a_small_regular_file_of_the_jobs_owner_is_read(tmp_path: Path) -> None:
    good = write(tmp_path / "job.json", JobConfig(name="j").model_dump(mode="json"))
    os.symlink(good, tmp_path / "link.json")
    os.mkfifo(tmp_path / "fifo.json")  # opened for reading, it would block until a writer came
    with open(tmp_path / "sparse.json", "wb") as f:
        f.truncate(100 << 30)  # 100 GiB of nothing
    cases = {
        str(tmp_path / "link.json"): "symbolic link",
        str(tmp_path / "fifo.json"): "not a regular file",
        "/dev/zero": "not a regular file",
        str(tmp_path / "sparse.json"): "more than the 1048576",
    }
    for path, why in cases.items():
        s = read_job_settings(path, ME)
        assert s.health == HealthConfig() and s.error is not None and why in s.error, (path, s.error)
    other = read_job_settings(good, ME + 1)  # someone else's file, as far as this job is concerned
    assert other.error == f"belongs to uid {ME}, not to uid {ME + 1}: ignored"
    assert read_job_settings(good, ME).error is None


def test_read_once_per_job_errors_logged_once_and_retried_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "job.json"
    good = JobConfig(name="j", health={"hang_timeout_s": 45}).model_dump(mode="json")
    cache = JobSettingsCache()
    with caplog.at_level(logging.ERROR):
        first = cache.get("7", ME, str(path), 0.0)  # not there yet (the shared file system lags)
        write(path, good)
        again = cache.get("7", ME, str(path), RETRY_S / 2)
    assert first.error and again is first
    assert sum(str(path) in r.getMessage() for r in caplog.records) == 1
    assert cache.get("7", ME, str(path), RETRY_S + 1).health.hang_timeout_s == 45
    write(path, {"name": "changed", "health": {"hang_timeout_s": 99}})
    assert cache.get("7", ME, str(path), 10 * RETRY_S).health.hang_timeout_s == 45  # a good read is kept
    # Job 7 as another user's (job ids are reused across clusters): read for that owner, not the cache.
    assert cache.get("7", ME + 1, str(path), 10 * RETRY_S).error is not None
    cache.keep([])
    assert cache.known() == {}


def test_a_job_first_seen_with_no_config_is_read_when_its_task_names_one(tmp_path: Path) -> None:
    """A task read before its exec names no config; once it names one, that file is read, not the cached error."""
    path = write(tmp_path / "job.json", JobConfig(name="j", health={"hang_timeout_s": 45}).model_dump(mode="json"))
    cache = JobSettingsCache()
    assert cache.get("8", ME, None, 0.0).error is not None
    named = cache.get("8", ME, path, 1.0)
    assert (named.error, named.source, named.health.hang_timeout_s) == (None, path, 45)


def test_a_versioned_job_json_is_applied_and_one_written_before_versions_too(tmp_path: Path) -> None:
    job = JobConfig(name="j", health={"hang_timeout_s": 600, "startup_timeout_s": 1200})
    doc = job_file_doc(job)
    assert doc[FORMAT_KEY] == FORMAT_VERSION
    for name, d in (("v1.json", doc), ("unversioned.json", job.model_dump(mode="json"))):
        s = read_job_settings(write(tmp_path / name, d), ME)
        assert (s.error, s.hangs, s.fallback) == (None, "act", False), name
        assert (s.health.hang_timeout_s, s.health.startup_timeout_s) == (600, 1200)


def test_an_unknown_format_version_gets_the_fallback_saying_which_versions_are_read(tmp_path: Path) -> None:
    newer = {
        **job_file_doc(JobConfig(name="j", health={"hang_timeout_s": 600, "startup_timeout_s": 1200})),
        FORMAT_KEY: FORMAT_VERSION + 1,
    }
    s = read_job_settings(write(tmp_path / "job.json", newer), ME)
    assert s.fallback and s.hangs == "report" and s.health == HealthConfig()
    assert s.error is not None and f"format version {FORMAT_VERSION + 1}" in s.error and "newer" in s.error
    assert f"reads format version {FORMAT_VERSION}" in s.error
    # Not an integer: refused without echoing the value.
    odd = read_job_settings(write(tmp_path / "odd.json", {**newer, FORMAT_KEY: "SECRET-VALUE"}), ME)
    assert odd.fallback and odd.error is not None and "not an integer" in odd.error and "SECRET" not in odd.error


def test_a_key_this_daemon_does_not_know_gets_the_fallback_naming_it(tmp_path: Path) -> None:
    doc = job_file_doc(JobConfig(name="j", health={"hang_timeout_s": 600, "startup_timeout_s": 1200}))
    doc["health"]["hang_grace_s"] = 5  # what a newer CLI might write
    s = read_job_settings(write(tmp_path / "job.json", doc), ME)
    assert s.fallback and s.hangs == "report" and s.health.hang_timeout_s == HealthConfig().hang_timeout_s
    assert s.error is not None and "health.hang_grace_s" in s.error and "newer" in s.error


def test_the_fallback_and_its_notice() -> None:
    s = fallback("job.json has format version 2", "/runs/j/job.json", ME)
    assert (s.error, s.source, s.owner, s.hangs, s.fallback) == (
        "job.json has format version 2",
        "/runs/j/job.json",
        ME,
        "report",
        True,
    )
    assert s.health == HealthConfig() and s.restart == JobSettings().restart
    notice = settings_notice(s)
    assert notice.startswith("your settings were not applied: /runs/j/job.json: job.json has format version 2")
    assert "hangs are reported, never acted on" in notice and "hang 30 s" in notice and "start-up 300 s" in notice
    assert JobSettings().hangs == "act"  # the job's own settings act on a hang


def test_a_file_not_there_is_news_only_once_the_retry_fails_an_invalid_one_at_once(tmp_path: Path) -> None:
    cache = JobSettingsCache()
    missing = str(tmp_path / "job.json")
    assert cache.get("1", ME, missing, 0.0).fallback and not cache.settled("1")  # a lagging shared file system
    assert not cache.settled("1") and cache.get("1", ME, missing, RETRY_S / 2).fallback  # cached, not read again
    assert cache.get("1", ME, missing, RETRY_S + 1).fallback and cache.settled("1")  # still not there: news
    bad = write(tmp_path / "bad.json", {**job_file_doc(JobConfig(name="j")), FORMAT_KEY: 99})
    assert cache.get("2", ME, bad, 0.0).fallback and cache.settled("2")
    good = write(tmp_path / "good.json", job_file_doc(JobConfig(name="j")))
    assert not cache.get("3", ME, good, 0.0).fallback and cache.settled("3")
    # A task of job 3 seen before its exec names no file: the file its other task named stands.
    assert cache.get("3", ME, None, 1.0).source == good
