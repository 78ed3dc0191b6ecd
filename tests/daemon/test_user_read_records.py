"""The daemon takes a user-reads helper's record only as records.py checks it: what a helper that lies sends
is a RecordError, never a value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lamplighter.configs.schema import HealthConfig, JobConfig
from lamplighter.lighthouse.status import LighthouseStatusError, LighthouseStatusUnreadable, parse_status
from lamplighter.supervisor.node.job_settings import fallback, settings_of
from lamplighter.supervisor.user_reads import records

REC = Path(__file__).parents[1] / "lighthouse_status" / "recorded"


def test_each_record_comes_back_as_what_the_helper_read() -> None:
    job = JobConfig(name="rec", run_dir="/runs/rec", health=HealthConfig(hang_timeout_s=45.0))
    s = settings_of(job, "/runs/rec/job.json", 1001)
    assert records.settings_from(records.settings_record(s), "/runs/rec/job.json", 1001) == s
    f = fallback("no such file", "/x/job.json", 1001, retryable=True)
    assert records.settings_from(records.settings_record(f), "/x/job.json", 1001) == f
    for page in ("status_two.html", "status_one_stale.html", "status_healing.html", "status_empty.html"):
        st = parse_status((REC / page).read_text())
        assert records.status_from(records.status_record(st)) == st
    assert records.address_from(records.address_record("http://n1:29510", None)) == ("http://n1:29510", None)
    with pytest.raises(LighthouseStatusUnreadable, match="another"):
        records.status_from(records.status_error_record(LighthouseStatusUnreadable("another torchft")))
    with pytest.raises(LighthouseStatusError, match="refused") as e:
        records.status_from(records.status_error_record(LighthouseStatusError("refused")))
    assert not isinstance(e.value, LighthouseStatusUnreadable)


def good_settings() -> dict[str, Any]:
    return records.settings_record(settings_of(JobConfig(name="rec"), "/j", 1))


def with_health(**kv: Any) -> dict[str, Any]:
    rec = good_settings()
    rec["health"] = {**rec["health"], **kv}
    return rec


@pytest.mark.parametrize(
    "rec",
    [
        {**good_settings(), "owner": 0},  # a key the record has not: the daemon's own word is not the helper's
        {k: v for k, v in good_settings().items() if k != "restart"},
        with_health(hang_timeout_s="30"),
        with_health(hang_timeout_s=-1.0),
        with_health(memory_max_percent=1e9),
        with_health(nme=1),
        {**good_settings(), "target_step": True},  # a bool is not a step
        {**good_settings(), "target_step": 1 << 70},
        {**good_settings(), "run_dir": "x" * 5000},
        {**good_settings(), "lighthouse": "file:///etc/shadow"},
        {"error": 1, "retryable": True},
        {"error": "x", "retryable": "yes"},
        [],
    ],
)
def test_a_settings_record_that_lies_is_refused(rec: Any) -> None:
    with pytest.raises(records.RecordError):
        records.settings_from(rec, "/j", 1)


def good_status() -> dict[str, Any]:
    return records.status_record(parse_status((REC / "status_two.html").read_text()))


@pytest.mark.parametrize(
    "change",
    [
        {"quorum_id": 1.5},
        {"quorum_id": None},
        {"quorum_age_s": float("nan")},
        {"members": [["g0:u", 1, "m", "s", 1]]},
        {"members": [["g0:u", "1", "m", "s", 1, False]]},
        {"members": [["g0:u", 1, "m", "s", 1, 0]]},
        {"members": [["g0:u", 1, "m", "s", 1, False]] * (records.MAX_ITEMS + 1)},
        {"heartbeats": [["g0:u", float("inf"), False]]},
        {"heartbeats": {"g0": 1}},
        {"next_quorum": ["x"]},
        {"extra": 1},
    ],
)
def test_a_status_record_that_lies_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(records.RecordError):
        records.status_from({**good_status(), **change})


@pytest.mark.parametrize(
    "rec", [{"address": "gopher://x", "why": None}, {"address": "http://x", "why": "both"}, {"address": 1, "why": None}]
)
def test_an_address_record_that_lies_is_refused(rec: dict[str, Any]) -> None:
    with pytest.raises(records.RecordError):
        records.address_from(rec)
