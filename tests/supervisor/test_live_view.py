"""The live view's plain (non-terminal) output, and the end-of-run summary."""

from __future__ import annotations

import io
from pathlib import Path

from lamplighter.local.live_view import GroupRow, LiveView
from lamplighter.report.step_tail import GroupProgress
from lamplighter.report.summary import summary_text


def test_plain_lines_are_rate_limited_and_events_always_print() -> None:
    out = io.StringIO()
    view = LiveView(out, live=True, plain_every_s=5.0)
    rows = [GroupRow(group=0, state="running", restarts=1, progress=GroupProgress(last_step=42))]
    view.update(100.0, 90.0, rows, 3.5, 500, "lh", 2)
    view.update(101.0, 90.0, rows, 3.5, 500, "lh", 2)
    view.event(101.5, 90.0, "kill group 0: hung")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "g0=42(running)" in lines[0] and "3.50 steps/s" in lines[0]
    assert lines[1].endswith("kill group 0: hung") and "+   11.5s" in lines[1]


def test_summary_names_faults_and_verdict() -> None:
    report = {
        "job": "demo",
        "reached_target": True,
        "steps_lost": 0,
        "weights_identical": True,
        "wall_s": 61.0,
        "steps_committed": 300,
        "target_steps": 300,
        "steps_compared": 290,
        "weights_check": "state hashes compared on 290 shared steps",
        "committed_samples_per_s": 250.0,
        "useful_samples_per_s": 249.0,
        "fault_free_samples_per_s": 280.0,
        "fault_free_source": "given (--baseline)",
        "goodput": 0.89,
        "steady_samples_per_s": 270.0,
        "steady": {"steady_s": 40.0, "windows": 3, "why_none": None},
        "goodput_vs_fault_free_run": 0.92,
        "chaos_plan": "schedule",
        "chaos_planned": 3,
        "chaos_struck": 1,
        "chaos_not_injected": 1,
        "chaos_after_end": 2,
        "chaos_missed": [{"kind": "kill", "planned_at_s": 12.0, "why": "group 0 has no process"}],
        "faults": [
            {
                "kind": "kill",
                "group": 1,
                "detection_latency_s": 0.05,
                "restart_after_detection_s": 0.0,
                "first_commit_after_restart_s": 4.4,
                "survivor_stall_s": None,
            }
        ],
        "group_status": {"2": {"status": "given_up", "reason": "crash loop"}},
    }
    text = summary_text(report, Path("/r"))
    assert "demo OK" in text and "steps lost 0" in text
    assert "goodput 0.89 (against this run's steady 270 samples/s over 40 s in 3 windows)" in text
    assert "0.92 against the fault-free 280 (given (--baseline))" in text
    assert "kill" in text and "group 1" in text and "4.40s" in text
    assert "group 2 GIVEN UP: crash loop" in text
    assert "chaos: 3 faults planned within the run, 1 struck, 1 hit nothing, 1 due but not fired" in text
    assert "planned kill at 12 s hit nothing: group 0 has no process" in text
    assert "2 scheduled faults fell after the job ended" in text
