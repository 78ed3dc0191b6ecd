"""goodput's fault-free rate: parsed from --baseline, read only from a fault-free run that fits the job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lamplighter.report.baseline import BaselineError, from_report, parse_baseline, read_report


def clean_report(**kw: Any) -> dict[str, Any]:
    return {
        "faults": [],
        "reached_target": True,
        "target_steps": 900,
        "groups": {"0": {}, "1": {}, "2": {}},
        "useful_samples_per_s": 120.5,
        **kw,
    }


def test_parse_baseline() -> None:
    assert parse_baseline("auto").auto
    assert parse_baseline("123.5").rate == 123.5
    assert parse_baseline("runs/clean/report/report.json").report == Path("runs/clean/report/report.json")
    with pytest.raises(BaselineError, match="positive"):
        parse_baseline("0")


def test_a_fault_free_report_of_the_same_job_is_a_baseline(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(clean_report()))
    b = read_report(path, target_steps=900, groups=3)
    assert b.samples_per_s == 120.5 and str(path) in b.source


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"faults": [{"kind": "unplanned"}]}, r"not a fault-free run \(1 fault\(s\): unplanned\)"),
        ({"reached_target": False}, "did not reach its target"),
        ({"target_steps": 300}, "a run of 300 steps, this job has 900"),
        ({"groups": {"0": {}}}, "a run of 1 groups, this job has 3"),
        ({"useful_samples_per_s": None}, "no committed samples"),
    ],
)
def test_a_report_that_is_no_baseline_is_refused_with_the_reason(change: dict[str, Any], why: str) -> None:
    with pytest.raises(BaselineError, match=why):
        from_report(clean_report(**change), "r.json", target_steps=900, groups=3)


def test_unreadable_reports_say_so(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="No such file"):
        read_report(tmp_path / "missing.json", target_steps=1, groups=1)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(BaselineError, match=r"not a report\.json"):
        read_report(tmp_path / "bad.json", target_steps=1, groups=1)
