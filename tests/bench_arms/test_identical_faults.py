"""The benchmark's faults: one exogenous schedule per repetition, the same for every strategy, delivered whatever
the target's state (struck or absorbed), and goodput.json saying so run by run. Pure: no process, no clock."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_a_schedule_is_the_seeds_alone_and_never_hits_every_group_within_the_guard(bench: ModuleType) -> None:
    from bench.fault_schedule import all_hit_within, draw

    kinds = ["kill", "kill", "hang", "hang-collective"]
    a = draw(1000, 3, kinds, window_s=40.0, group_mtbf_s=9.0, guard_s=12.0)
    assert a == draw(1000, 3, kinds, window_s=40.0, group_mtbf_s=9.0, guard_s=12.0)
    assert a != draw(2000, 3, kinds, window_s=40.0, group_mtbf_s=9.0, guard_s=12.0)
    assert [f.t for f in a.faults] == sorted(f.t for f in a.faults)
    assert all(3.0 <= f.t < 40.0 and f.group in (0, 1, 2) and f.kind in kinds for f in a.faults)
    counts = []
    for seed in range(200):
        s = draw(seed, 3, kinds, window_s=40.0, group_mtbf_s=9.0, guard_s=12.0)
        assert not all_hit_within(s.faults, 3, 12.0)
        counts.append(len(s.faults))
    # One fault per group per window (37 s / 9 s, about 4 each), less the guard's drops: steady, never 0.
    assert min(counts) >= 6 and max(counts) <= 13


def test_the_guard_drops_the_fault_that_would_leave_no_group_unhit(bench: ModuleType) -> None:
    from bench.fault_schedule import ScheduledFault, guard

    faults = [ScheduledFault(1.0, 0, "kill"), ScheduledFault(2.0, 1, "kill"), ScheduledFault(3.0, 2, "kill")]
    assert guard(faults, 3, guard_s=5.0) == faults[:2]
    assert guard(faults, 3, guard_s=1.5) == faults  # group 0's fault has left the window by then
    again = [*faults[:2], ScheduledFault(3.0, 0, "hang")]
    assert guard(again, 3, guard_s=5.0) == again  # a group already hit may be hit again


@pytest.mark.parametrize(
    ("kind", "target", "outcome", "action"),
    [
        ("kill", {"pid": None}, "absorbed", None),
        ("hang", {"pid": None}, "absorbed", None),
        ("kill", {"pid": 7}, "struck", "sigkill"),
        ("kill", {"pid": 7, "stopped": True}, "struck", "sigkill"),  # a kill frees a hung process
        ("kill", {"pid": 7, "blocked": True}, "struck", "sigkill"),
        ("hang", {"pid": 7}, "struck", "sigstop"),
        ("hang", {"pid": 7, "stopped": True}, "absorbed", None),
        ("hang", {"pid": 7, "blocked": True}, "struck", "sigstop"),  # its heartbeats stop too
        ("hang-collective", {"pid": 7}, "struck", "hang-collective"),
        ("hang-collective", {"pid": 7, "blocked": True}, "absorbed", None),
        ("hang-collective", {"pid": 7, "stopped": True}, "absorbed", None),
        ("node-crash", {"pid": 7, "stopped": True}, "struck", "crash-node"),
    ],
)
def test_a_fault_strikes_whatever_is_there_and_is_absorbed_when_nothing_is(
    bench: ModuleType, kind: str, target: dict[str, Any], outcome: str, action: str | None
) -> None:
    from bench.delivery import Target, decide

    d = decide(kind, Target(**target))
    assert (d.outcome, d.action) == (outcome, action) and d.why


def test_the_timed_trigger_fires_each_fault_at_its_time_after_the_first_commit(bench: ModuleType) -> None:
    from bench.fault_schedule import ScheduledFault
    from bench.runrecord import StepFollower
    from bench.slurm_drive import JobView, Timed

    faults = [ScheduledFault(3.0, 1, "kill"), ScheduledFault(3.5, 2, "hang")]
    t = Timed(faults)
    job = JobView(3, StepFollower(Path("/nonexistent"), 3))
    assert t.due(102.9, 100.0, job) is None
    assert t.due(103.0, 100.0, job) == faults[0]
    assert t.due(103.1, 100.0, job) is None
    assert t.due(110.0, 100.0, job) == faults[1]  # late, still delivered: a schedule is never thinned
    assert t.due(120.0, 100.0, job) is None and t.release(120.0, job) is None and not t.finished(120.0, job)


def run_row(strategy: str, rep: int, rate: float, faulted: bool, outcomes: list[str]) -> dict[str, Any]:
    faults = [
        {"kind": "kill", "index": i % 3, "t_injected": 110.0 + i, "t_scheduled": 10.0 + i, "outcome": o, "why": "w"}
        for i, o in enumerate(outcomes)
    ]
    run = {"strategy": strategy, "rep": rep, "mtbf_s": 9.0 if faulted else None, "t_start": 90.0, "faults": faults}
    return {"run": run, "metrics": {"samples_per_s": rate, "startup_s": 10.0, "train_s": 40.0, "steps_lost": 0}}


def test_goodput_json_lists_each_runs_faults_and_rate_against_one_yardstick_and_its_own_fault_free(
    bench: ModuleType,
) -> None:
    from bench.summarize import add_ratios, goodput_table, run_entry, same_faults

    rows = [
        run_row("ddp", 0, 100.0, False, []),
        run_row("torchft", 0, 80.0, False, []),
        run_row("ckpt-restart", 0, 90.0, False, []),
        run_row("lamplighter", 0, 60.0, True, ["struck", "struck"]),
        run_row("poll-10s", 0, 50.0, True, ["struck", "absorbed"]),
        run_row("ckpt-restart", 0, 30.0, True, ["struck", "absorbed"]),
    ]
    runs = [run_entry(r) for r in rows]
    add_ratios(runs)
    by = {(r["strategy"], r["faulted"]): r for r in runs}
    lamp = by[("lamplighter", True)]
    assert set(lamp) >= {"strategy", "rep", "faults", "samples_per_s"}
    assert lamp["faults"][0] == {
        "t": 10.0,
        "group": 0,
        "kind": "kill",
        "outcome": "struck",
        "why": "w",
        "t_delivered": 10.0,
    }
    assert lamp["goodput_abs"] == pytest.approx(0.6) and lamp["goodput_rel"] == pytest.approx(0.75)  # over torchft's
    assert by[("poll-10s", True)]["goodput_rel"] == pytest.approx(50 / 80)
    assert by[("ckpt-restart", True)]["goodput_rel"] == pytest.approx(30 / 90)
    assert by[("torchft", False)]["goodput_abs"] == pytest.approx(0.8)  # torchft's cost when nothing fails shows
    table = goodput_table(runs)
    assert table["table"]["poll-10s"]["absorbed"]["median"] == 1
    assert table["ratios"]["lamplighter/poll-10s"]["median"] == pytest.approx(1.2)
    assert table["fault_free"]["ckpt-restart"]["over_yardstick"]["median"] == pytest.approx(0.9)
    assert same_faults(runs)
    runs[-1]["faults"][0]["group"] = 2  # another list for one strategy of the repetition
    assert not same_faults(runs)


def test_the_degraded_step_period_ratio_compares_a_survivors_period_with_a_group_out_to_all_in(
    bench: ModuleType,
) -> None:
    from bench.summarize import degraded_ratio

    run = {
        "record": {"replicas": 3},
        "metrics": {"step_period_by_participants": {"3": {"median_s": 0.5, "n": 30}, "2": {"median_s": 0.6, "n": 10}}},
    }
    assert degraded_ratio(run) == pytest.approx(1.2)  # what the unpaced harness showed: survivors 1.2x faster
    run["metrics"]["step_period_by_participants"] = {"3": {"median_s": 0.5, "n": 30}}
    assert degraded_ratio(run) is None  # no group was ever out
