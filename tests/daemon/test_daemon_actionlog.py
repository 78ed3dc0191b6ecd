from __future__ import annotations

import json
from pathlib import Path

import pytest

from lamplighter.rundir.actions import ActionLog, FileSink, format_action


def test_one_line_with_everything() -> None:
    lines: list[str] = []
    log = ActionLog("n3", lines.append)
    log.write(
        1700000000.25,
        "drain",
        "n3",
        "uncorrectable ECC on gpu 1",
        {"gpu": 1, "ecc_uncorrectable": 2, "baseline": 0, "path": Path("/dev/kfd")},
        decision_id="a17",
    )
    assert len(lines) == 1 and "\n" not in lines[0]
    rec = json.loads(lines[0])
    assert rec == {
        "time": "2023-11-14T22:13:20.250+00:00",
        "ts": 1700000000.25,
        "node": "n3",
        "action": "drain",
        "target": "n3",
        "reason": "uncorrectable ECC on gpu 1",
        "observation": {"gpu": 1, "ecc_uncorrectable": 2, "baseline": 0, "path": "/dev/kfd"},
        "decision_id": "a17",
    }


def test_newlines_in_values_stay_on_one_line() -> None:
    line = format_action(0.0, "n1", "kill", "pid 5", "hung\nno step for 30 s", {"stderr": "a\nb"})
    assert "\n" not in line and json.loads(line)["reason"] == "hung\nno step for 30 s"


def test_extra_cannot_overwrite_fixed_fields() -> None:
    with pytest.raises(ValueError, match="'ts'"):
        format_action(0.0, "n1", "kill", "pid 5", "hang", {}, ts=5)


def test_file_sink_appends_lines(tmp_path: Path) -> None:
    path = tmp_path / "log" / "actions.jsonl"
    sink = FileSink(path)
    log = ActionLog("n1", sink)
    log.write(1.0, "requeue", "job 812", "trainer exited 1", {"exit": 1})
    log.write(2.0, "refuse-drain", "n1", "drain limit reached", {"drained": 3})
    sink.close()
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["action"] for r in recs] == ["requeue", "refuse-drain"]
