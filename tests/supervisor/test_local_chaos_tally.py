"""What `lamplighter local` says about its chaos at the end: faults planned within the run, and what struck."""

from __future__ import annotations

import io
import itertools
from dataclasses import replace
from pathlib import Path

from lamplighter.chaos.injector import Targets
from lamplighter.chaos.plan import parse_chaos, plan
from lamplighter.configs.schema import ChaosConfig, JobConfig
from lamplighter.local.run import LocalOptions, LocalRun

ALL = Targets(healthy=[0, 1], present=[0, 1], lighthouse_healthy=True)


def ended_run(tmp_path: Path, chaos: ChaosConfig, trained_s: float, finishing_s: float | None = None) -> LocalRun:
    """A run whose training started at t=1000 and that ends `trained_s` later (no process was started)."""
    job = JobConfig.model_validate({"name": "j", "groups": {"count": 2}, "trainer": {"steps": 100}})
    now = [1000.0]
    opts = LocalOptions(
        run_dir=tmp_path / "run", report_dir=tmp_path / "rep", chaos=chaos, live=False, out=io.StringIO()
    )
    run = LocalRun(job, opts, clock=lambda: now[0])
    run.t_train = 1000.0
    first = run.chaos.injector.next_at_s()
    assert first is not None and run.chaos.injector.due(first, ALL) is not None  # one fault struck
    if finishing_s is not None:
        run.state = replace(run.state, finishing_since=1000.0 + finishing_s)
    now[0] = 1000.0 + trained_s
    return run


def printed(run: LocalRun) -> str:
    out = run.opts.out
    assert isinstance(out, io.StringIO)
    return out.getvalue()


def test_a_random_plan_counts_only_the_faults_planned_within_the_run(tmp_path: Path) -> None:
    """Regression: `--chaos mtbf=20s` ended with "9997 planned faults were not injected (the job ended first)"."""
    chaos = parse_chaos("mtbf=20s,seed=1")
    within = [f for f in itertools.islice(plan(chaos, 2), 50) if f.at_s <= 100.0]
    run = ended_run(tmp_path, chaos, trained_s=100.0)
    report = run._finish(interrupted=False)
    assert (report["chaos_plan"], report["chaos_planned"], report["chaos_struck"]) == ("random", len(within), 1)
    assert report["chaos_not_injected"] == len(within) - 1 and report["chaos_after_end"] is None
    out = printed(run)
    assert f"chaos: {len(within)} faults planned within the run, 1 struck, 0 hit nothing" in out
    assert "after the job" not in out and "were not injected" not in out


def test_no_fault_counts_once_the_job_is_finishing(tmp_path: Path) -> None:
    chaos = parse_chaos("mtbf=20s,seed=1")
    within = [f for f in itertools.islice(plan(chaos, 2), 50) if f.at_s <= 40.0]
    report = ended_run(tmp_path, chaos, trained_s=100.0, finishing_s=40.0)._finish(interrupted=False)
    assert report["chaos_planned"] == len(within)


def test_a_schedule_names_its_events_after_the_end(tmp_path: Path) -> None:
    events = [{"at_s": t, "kind": "kill", "group": 0} for t in (5, 50, 150, 300)]
    chaos = ChaosConfig(enabled=True, schedule=events)
    run = ended_run(tmp_path, chaos, trained_s=100.0)
    report = run._finish(interrupted=False)
    assert (report["chaos_planned"], report["chaos_struck"], report["chaos_not_injected"]) == (2, 1, 1)
    assert report["chaos_after_end"] == 2
    assert "2 scheduled faults fell after the job ended" in printed(run)
