"""`lamplighter why JOB`: the daemons' action lines about a job, per group and attempt (recorded lines)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lamplighter.commands.cli import main
from lamplighter.rundir.action_history import history, parse_lines, render
from lamplighter.supervisor.state_store import DaemonState

RECORDED = Path(__file__).parent / "recorded" / "actions_demo.jsonl"
SUBMITTED = {"811": "demo/g0", "812": "demo/g1"}


def test_history_per_group_and_attempt_in_time_order() -> None:
    records, bad = parse_lines(RECORDED.read_text().splitlines())
    assert bad == 1
    h = history(records + records, SUBMITTED, "demo")  # read twice (two logs): each line once
    doc = h.to_json()
    assert [g["group"] for g in doc["groups"]] == ["demo/g0", "demo/g1"]
    g0, g1 = doc["groups"]
    assert [(a["attempt"], [x["action"] for x in a["actions"]]) for a in g1["attempts"]] == [
        (0, ["kill_local", "requeue"]),
        (1, ["drain", "kill_local"]),  # the drain on n3 moved this group (and another job's, left out)
    ]
    # An old line without `jobs` is placed by its target and the observation's attempt.
    assert [(a["attempt"], [x["action"] for x in a["actions"]]) for a in g0["attempts"]] == [
        (3, ["requeue"]),
        (10, ["give_up"]),
    ]
    assert "other/g0" not in json.dumps([g["group"] for g in doc["groups"]])


def test_render_says_when_where_why_and_on_what_evidence() -> None:
    records, _ = parse_lines(RECORDED.read_text().splitlines())
    text = render(history(records, SUBMITTED, "demo"), "job demo")
    block = text[text.index("group demo/g1") :]
    assert block.index("attempt 0") < block.index("requeue 812") < block.index("attempt 1") < block.index("drain n3")
    assert "2026-03-02T10:07:00.000+00:00  n3  drain n3  [ok]" in block
    assert "why: lamplighter: GPU 3 uncorrectable ECC +2 (max 0)" in block
    assert "seen: GPU 3 fault ecc-uncorrectable" in block
    assert "why: GIVING UP on Slurm job 811: restart budget exhausted" in text
    assert "no daemon action recorded" in render(history([], SUBMITTED, "demo"), "job demo")


def test_why_command_reads_the_run_dir_and_extra_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "runs" / "demo"
    run_dir.mkdir(parents=True)
    lines = RECORDED.read_text().splitlines()
    (run_dir / "actions.jsonl").write_text("\n".join(lines[:3]) + "\n")
    node_log = tmp_path / "n3-actions.jsonl"
    node_log.write_text("\n".join(lines[3:]) + "\n")
    assert main(["why", "demo", "--run-dir", str(run_dir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [a["attempt"] for g in doc["groups"] for a in g["attempts"]] == [0]
    assert main(["why", "demo", "--run-dir", str(run_dir), "--log", str(node_log), "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    # No submission.json here: the old line naming no group (job 811, attempt 3) cannot be placed, so is left out.
    assert {g["group"]: [a["attempt"] for a in g["attempts"]] for g in doc["groups"]} == {
        "demo/g0": [10],
        "demo/g1": [0, 1],
    }
    assert "1 line(s) that are no action record skipped" in out.err
    assert main(["why", "demo", "--run-dir", str(run_dir), "--log", str(tmp_path / "nope")]) == 2


def test_why_without_any_action_log_says_nothing_was_done(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(tmp_path, ignore_errors=True)
    (tmp_path / "runs" / "quiet").mkdir(parents=True)
    assert main(["why", "quiet", "--run-dir", str(tmp_path / "runs" / "quiet")]) == 0
    assert "no daemon action recorded" in capsys.readouterr().out


def test_policy_state_survives_reopening_the_state_dir(tmp_path: Path) -> None:
    state = DaemonState.load(tmp_path)
    state.set_policy(1.0, "vm_faults", [[1.0, "17"]])
    state.set_policy(2.0, "vm_faults", [[1.0, "17"], [2.0, "18"]])
    state.close()
    state = DaemonState.load(tmp_path)  # replayed from the journal
    assert state.policy() == {"vm_faults": [[1.0, "17"], [2.0, "18"]]}
    state.save()
    state.close()
    state = DaemonState.load(tmp_path)  # from the snapshot
    assert state.policy()["vm_faults"] == [[1.0, "17"], [2.0, "18"]]
    state.close()
