"""`lamplighter local` with warm standbys: a killed group comes back in a standby's process and heals."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
from realparts import FAR_STEPS, STEP_SLEEP_S, stop_once_all_commit_after

from lamplighter.commands.local import add_parser, run_local

JOB = f"""
name: warm
trainer:
  steps: {FAR_STEPS}
  model: {{dim: 64, layers: 2, heads: 4, seq_len: 32, batch_size: 16, step_sleep_s: {STEP_SLEEP_S}}}
  checkpoint: {{enabled: false}}
groups: {{count: 2}}
lighthouse: {{port: 0, min_replicas: 1, quorum_tick_ms: 20, join_timeout_ms: 1000, heartbeat_timeout_ms: 500}}
torchft: {{pg_timeout_s: 2, timeout_s: 3, quorum_timeout_s: 4, connect_timeout_s: 10}}
health: {{hang_timeout_s: 5, poll_interval_s: 0.5}}
restart: {{budget_per_group: 5, backoff_initial_s: 0, standby: 1}}
"""

# The second kill hits the group the first one's standby became: the pool must have refilled in between.
# The job trains until the test stops it, once both groups commit after the second kill.
SCHEDULE = """
- {at_s: 4, kind: kill, group: 1}
- {at_s: 14, kind: kill, group: 1}
"""


@pytest.mark.integration
@pytest.mark.heavy(seconds=35)
def test_killed_groups_come_back_in_standbys_and_heal(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(JOB)
    (tmp_path / "chaos.yaml").write_text(SCHEDULE)
    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers())
    run_dir = tmp_path / "run"
    stop_once_all_commit_after(run_dir, 2, after_s=18.0)
    rc = run_local(
        ap.parse_args(
            ["local", str(tmp_path / "job.yaml"), "--chaos", f"@{tmp_path / 'chaos.yaml'}", "--run-dir", str(run_dir)]
            + ["--report", str(tmp_path / "report"), "--no-live"]
        )
    )
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    faults = report["faults"]
    summary = json.dumps([{k: f.get(k) for k in ("kind", "attempt", "warm", "detected_as")} for f in faults])
    assert [(f["kind"], f["attempt"], f["warm"]) for f in faults] == [("kill", 0, True), ("kill", 1, True)], summary
    assert report["standby"]["used"] == 2 and report["standby"]["cold_reasons"] == [], report["standby"]
    # Attempt 1 ran in the process the first standby started: the second kill names its pid.
    standby_pid = re.search(r"ready \(pid (\d+)\)", (run_dir / "logs" / "standby1.log").read_text())
    assert standby_pid and f"(pid {standby_pid[1]}, attempt 1)" in faults[1]["detected_as"], summary
    log = (run_dir / "logs" / "group1.log").read_text()
    assert "attempt 1: job progress" in log and "attempt 2: job progress" in log
    for f in faults:
        assert f["t_first_commit_after"] and f["t_first_commit_after"] > f["t_restarted"], summary
    assert report["steps_lost"] == 0 and report["weights_identical"] is True and report["reached_target"]
    assert rc == 0
    assert all(s["status"] == "done" for s in report["group_status"].values())
