"""Goodput, lost work and recovery anatomy of one run, from its step logs and faults (any strategy).

Definitions:
- committed samples: every (replica, step) that ended committed counts its
  samples once (a step recomputed after a restart counts once, at its last commit).
- training time: from the run's first committed step to the first commit of
  the target step. Startup is left out (it differs by substrate, not by
  strategy) but reported as `startup_s`.
- goodput: committed samples per second of training time; `goodput_rel`
  divides it by the same strategy's fault-free run of the same repetition.
- lost steps: step numbers committed, then committed again after a rollback
  (lamplighter.supervisor.report.lost_steps: a restart count is the
  checkpoint-restart trainer's quorum id).
- recovery anatomy of a fault at t0 on replica r, each a delay after t0:
  detect: the strategy noticed; survivors_commit: another replica commits in
  a new quorum (checkpoint-restart: a new run of the job); failed_runs: r's
  process runs again; failed_commits: r's first commit after that; progress:
  the job commits a step beyond everything committed before t0 (work lost
  to a rollback is redone by then).
"""

from __future__ import annotations

from typing import Any

from bench.runrecord import Fault, RunRecord
from lamplighter.supervisor.report import lost_steps
from lamplighter.trainer.steplog import StepRecord


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


def t_target(run: RunRecord) -> float | None:
    ts = [r.t for recs in run.steps.values() for r in recs if r.committed and r.step >= run.target_steps]
    return min(ts) if ts else None


def t_first(run: RunRecord) -> float | None:
    ts = [r.t for recs in run.steps.values() for r in recs if r.committed]
    return min(ts) if ts else None


def run_metrics(run: RunRecord) -> dict[str, Any]:
    first, end = t_first(run), t_target(run)
    stop = end if end is not None else run.t_end
    train_s = None if first is None else stop - first
    samples = committed_samples(run, stop)
    lost = lost_steps(run.steps)
    return {
        "reached": run.reached and end is not None,
        "startup_s": None if first is None else first - run.t_start,
        "train_s": train_s,
        "wall_to_target_s": None if end is None else end - run.t_start,
        "committed_samples": samples,
        "goodput_samples_per_s": samples / train_s if train_s else None,
        "faults": len(run.faults),
        "steps_lost": len(lost),
        "steps_lost_per_fault": len(lost) / len(run.faults) if run.faults else None,
        "anatomy": [anatomy(run, f) for f in run.faults],
    }


def anatomy(run: RunRecord, f: Fault) -> dict[str, Any]:
    t0 = f.t_injected
    others = [i for i in run.steps if i != f.index]
    survivors = None
    for i in others:
        recs = committed(run.steps[i])
        before = [r for r in recs if r.t <= t0]
        q0 = before[-1].quorum_id if before else None
        after = next((r.t for r in recs if r.t > t0 and r.quorum_id != q0), None)
        if after is not None and (survivors is None or after < survivors):
            survivors = after
    failed_commit = None
    if f.index is not None and f.t_restarted is not None:
        failed_commit = next((r.t for r in committed(run.steps.get(f.index, [])) if r.t > f.t_restarted), None)
    high = max((r.step for recs in run.steps.values() for r in recs if r.committed and r.t <= t0), default=0)
    progress = min(
        (r.t for recs in run.steps.values() for r in recs if r.committed and r.t > t0 and r.step > high), default=None
    )

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
