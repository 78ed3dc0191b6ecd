"""Goodput's yardstick from the run itself: the rate of its steady stretches, on synthetic step logs."""

from __future__ import annotations

import pytest
from test_report import rec

from lamplighter.report.build import build_report
from lamplighter.report.fault_journal import FaultJournal, FaultRecord
from lamplighter.rundir.steplog import StepRecord


def steps(g: int, first: int, last: int, t0: float, period: float, **kw: object) -> list[StepRecord]:
    return [rec(g, s, t0 + (s - first) * period, **kw) for s in range(first, last + 1)]  # type: ignore[arg-type]


def test_a_slower_machine_is_still_goodput_one_without_faults() -> None:
    """The yardstick moves with the machine: a run whose steps take twice as long is not a run that lost half."""
    for period in (1.0, 2.0):
        runs = {g: steps(g, 1, 40, 1.0, period) for g in (0, 1)}
        rep = build_report(runs, [], target_steps=40, t_start=0.0, t_end=41 * period)
        assert rep["goodput"] == pytest.approx(1.0)
        assert rep["steady_samples_per_s"] == pytest.approx(32 / period)
        # A fault-free run measured on a quieter machine would have said 0.5 of the slow run.
    slow = {g: steps(g, 1, 40, 1.0, 2.0) for g in (0, 1)}
    rep = build_report(slow, [], target_steps=40, t_start=0.0, t_end=81.0, baseline_samples_per_s=32.0)
    assert rep["goodput_vs_fault_free_run"] == pytest.approx(0.5) and rep["goodput"] == pytest.approx(1.0)


def test_a_group_down_costs_its_share_and_its_stretch_is_left_out_of_the_yardstick() -> None:
    """Group 1 killed at 20.5, back in a new attempt at step 31 (t=31): steps 21..30 trained by group 0 alone,
    half the samples for 10 s. Steady: before the kill and after the settling, at 32 samples/s."""
    g0 = steps(0, 1, 50, 1.0, 1.0)
    g1 = steps(1, 1, 20, 1.0, 1.0) + steps(1, 31, 50, 31.0, 1.0, attempt=1, healed="peer:0")[:1]
    g1 += steps(1, 32, 50, 32.0, 1.0, attempt=1)
    j = FaultJournal()
    j.injected(FaultRecord(kind="kill", group=1, planned_at_s=19.5, t_injected=20.5, attempt=0))
    j.detected(1, 0, 20.6, "killed")
    j.restarted(1, 21.0)
    rep = build_report({0: g0, 1: g1}, j.faults, target_steps=50, t_start=0.0, t_end=51.0)
    st = rep["steady"]
    assert rep["steady_samples_per_s"] == pytest.approx(32.0) and st["windows"] == 2
    # Steps 3..50 after the first steady step (t=2): 48 s at 32 samples/s would be 1536; 10 of them at 16.
    assert rep["goodput"] == pytest.approx((1536 - 10 * 16) / 1536, abs=1e-3)
    # The kill's stretch (20.5 until both committed after step 31, plus 2 steps) is not steady.
    assert st["steady_s"] == pytest.approx((20 - 2) + (50 - 33), abs=1e-6)


def test_a_fault_never_recovered_disturbs_the_rest_of_the_run() -> None:
    g0 = steps(0, 1, 30, 1.0, 1.0)
    g1 = steps(1, 1, 15, 1.0, 1.0)
    fault = FaultRecord(kind="hang", group=1, planned_at_s=15.0, t_injected=15.5, attempt=0)
    rep = build_report({0: g0, 1: g1}, [fault], target_steps=30, t_start=0.0, t_end=31.0)
    assert rep["steady"]["windows"] == 1 and rep["steady"]["steady_s"] == pytest.approx(13.0)
    assert rep["goodput"] == pytest.approx((13 * 32 + 15 * 16) / (28 * 32), abs=1e-3)


def test_a_reload_no_fault_explains_is_not_steady_either() -> None:
    """Both groups go back to a checkpoint (a new attempt each, no fault in the journal): the redo's gap is cut."""
    runs = {g: steps(g, 1, 20, 1.0, 1.0) + steps(g, 15, 40, 25.0, 1.0, attempt=1, q=2) for g in (0, 1)}
    rep = build_report(runs, [], target_steps=40, t_start=0.0, t_end=51.0)
    assert rep["steady_samples_per_s"] == pytest.approx(32.0)
    assert rep["goodput"] is not None and rep["goodput"] < 0.8


def test_faults_too_dense_leave_no_yardstick_and_say_so() -> None:
    runs = {g: steps(g, 1, 12, 1.0, 1.0) for g in (0, 1)}
    faults = [
        FaultRecord(kind="kill", group=1, planned_at_s=None, t_injected=t, attempt=0, t_detected=t + 0.1)
        for t in (3.5, 7.5)
    ]
    rep = build_report(runs, faults, target_steps=12, t_start=0.0, t_end=13.0)
    assert rep["goodput"] is None and "steady steps" in rep["steady"]["why_none"]
