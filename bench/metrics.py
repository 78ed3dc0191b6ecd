"""Goodput, lost work and recovery anatomy of one run, from its step logs and faults (any strategy).

Definitions:
- committed samples: every (replica, step) that ended committed counts its
  samples once (a step recomputed after a rollback counts once); a step
  committed by fewer groups counts only their samples.
- the window: from the run's first committed step, `window_s` seconds (or
  less, for a run that ended early); startup is left out (it differs by
  substrate, not by strategy) but reported as `startup_s`.
- samples_per_s: committed samples within the window per second of it.
- lost steps: step numbers committed, then committed again after a rollback
  (lamplighter.report.build.rolled_back: a restart count is the
  checkpoint-restart trainer's quorum id; a fallback checkpoint is the torchft
  strategies' rollback).
- recovery anatomy of a struck fault at t0 on replica r, each a delay after t0:
  detect: the strategy noticed; survivors_commit: another replica commits in
  a new quorum (checkpoint-restart: a new run of the job) or after a stall,
  not a step that was in flight; failed_runs: r's process runs again;
  failed_commits: r's first commit after that; progress: such a commit of a
  step beyond everything committed before t0 (work lost to a rollback is
  redone by then).
"""

from __future__ import annotations

import itertools
from typing import Any

from bench.delivery import STRUCK
from bench.runrecord import Fault, RunRecord
from lamplighter.report.build import rolled_back
from lamplighter.rundir.steplog import StepRecord


def committed(recs: list[StepRecord]) -> list[StepRecord]:
    return sorted((r for r in recs if r.committed), key=lambda r: r.t)


def committed_samples(run: RunRecord, until: float | None = None) -> int:
    total = 0
    for recs in run.steps.values():
        last: dict[int, int] = {}
        for r in committed(recs):
            if until is None or r.t <= until:
                last[r.step] = r.samples
        total += sum(last.values())
    return total


def t_first(run: RunRecord) -> float | None:
    ts = [r.t for recs in run.steps.values() for r in recs if r.committed]
    return min(ts) if ts else None


def run_metrics(run: RunRecord) -> dict[str, Any]:
    first = t_first(run)
    stop = None if first is None else min(first + run.window_s, run.t_end)
    train_s = None if first is None or stop is None else stop - first
    samples = committed_samples(run, stop) if stop is not None else 0
    lost = rolled_back(run.steps)
    struck = [f for f in run.faults if f.outcome == STRUCK]
    return {
        "lasted_window": run.reached,
        "startup_s": None if first is None else first - run.t_start,
        "train_s": train_s,
        "committed_samples": samples,
        "high_step": max(
            (r.step for recs in run.steps.values() for r in committed(recs) if stop is None or r.t <= stop), default=0
        ),
        "samples_per_s": samples / train_s if train_s else None,
        "faults_delivered": len(run.faults),
        "faults_struck": len(struck),
        "faults_absorbed": len(run.faults) - len(struck),
        "steps_lost": len(lost),
        "anatomy": [anatomy(run, f) for f in struck],
        "step_period_by_participants": step_period_by_participants(run, stop),
    }


def step_period_by_participants(run: RunRecord, until: float | None) -> dict[str, dict[str, float]]:
    """A replica's median gap between consecutive committed steps, keyed by how many replicas committed the later
    one: with the machine's effect removed (bench.gpu_time_trainer's deadlines) a survivor's period with a group
    out is the same as with all in. Gaps of a stall (over twice the run's median gap) are left out."""
    gaps: dict[int, list[float]] = {}
    for recs in run.steps.values():
        done = [r for r in committed(recs) if until is None or r.t <= until]
        for a, b in itertools.pairwise(done):
            if b.step == a.step + 1:
                gaps.setdefault(b.participants, []).append(b.t - a.t)
    every = sorted(g for gs in gaps.values() for g in gs)
    if not every:
        return {}
    cap = 2 * every[len(every) // 2]
    out = {}
    for n, gs in sorted(gaps.items()):
        kept = sorted(g for g in gs if g <= cap)
        if kept:
            out[str(n)] = {"median_s": round(kept[len(kept) // 2], 4), "n": len(kept)}
    return out


def anatomy(run: RunRecord, f: Fault) -> dict[str, Any]:
    t0 = f.t_injected
    high = max((r.step for recs in run.steps.values() for r in recs if r.committed and r.t <= t0), default=0)
    survivors = progress = None
    for i, recs in run.steps.items():
        t_new = first_after_stall(committed(recs), t0)
        if t_new is None:
            continue
        if i != f.index and (survivors is None or t_new < survivors):
            survivors = t_new
        t_prog = next((r.t for r in committed(recs) if r.t >= t_new and r.step > high), None)
        if t_prog is not None and (progress is None or t_prog < progress):
            progress = t_prog
    failed_commit = None
    if f.index is not None and f.t_restarted is not None:
        failed_commit = next((r.t for r in committed(run.steps.get(f.index, [])) if r.t > f.t_restarted), None)

    def delay(t: float | None) -> float | None:
        return None if t is None else round(t - t0, 3)

    return {
        "kind": f.kind,
        "index": f.index,
        "t_injected": t0,
        "detect_s": delay(f.t_detected),
        "survivors_commit_s": delay(survivors),
        "failed_runs_s": delay(f.t_restarted),
        "failed_commits_s": delay(failed_commit),
        "progress_s": delay(progress),
    }


def first_after_stall(recs: list[StepRecord], t0: float) -> float | None:
    """The first commit after t0 that the fault could not have let through: in a new quorum (a new run of the
    job, for checkpoint-restart) or after a stall. Steps already in flight when the fault hit do not count."""
    before = [r for r in recs if r.t <= t0]
    q0 = before[-1].quorum_id if before else None
    gaps = sorted(b.t - a.t for a, b in itertools.pairwise(before))
    stall = max(1.0, 5 * gaps[len(gaps) // 2]) if gaps else 1.0
    prev = before[-1].t if before else None
    for r in recs:
        if r.t <= t0:
            continue
        if r.quorum_id != q0 or (prev is not None and r.t - prev > stall):
            return r.t
        prev = r.t
    return None
