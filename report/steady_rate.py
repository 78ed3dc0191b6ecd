"""The run's own fault-free rate, goodput's yardstick: samples per second over its steady windows.

A fault-free run taken minutes before (`--baseline auto`) trains on a machine
whose load has moved since: here `make demo` read goodput 1.045 against one,
and a run of 12% slower steps than its baseline read 1.00 with every group
down 3.6 s. The yardstick is measured in the same run instead, where nothing
was failing:

- from the step at which every group has committed twice (the first step of
  an attempt holds its start-up and first quorum) to the run's last commit,
- leaving out each fault's disturbance: from its injection (a fault nobody
  injected: its group's last commit before it was seen) until every group
  has committed again after the faulted group's first commit after its
  restart (a Lighthouse fault: any group's), plus SETTLE_STEPS normal steps;
  a fault never recovered disturbs the rest of the run;
- and each group's change of attempt that no fault explains (a reload from
  the fallback checkpoint), from its last commit of one attempt to its first
  of the next.

The rate counts each step of the final timeline once (report.final_commits),
at the instant its last group committed it, over the windows' steps after
each window's first. Goodput is the useful samples from that first steady
step to the last commit over what the steady rate would have trained in that
time: 1.0 for a run with nothing failing, whatever the machine's speed.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lamplighter.rundir.steplog import StepRecord

# Steps after a disturbance's end still left out: the quorum that takes the rejoined group back settles.
SETTLE_STEPS = 2
# Fewer steady steps than this measure no rate worth dividing by.
MIN_STEADY_STEPS = 10


@dataclass(frozen=True)
class SteadyRate:
    samples_per_s: float | None  # None: too little steadiness to measure (why_none says how little)
    steady_s: float  # the windows' total length
    windows: int
    steps: int  # steps counted in the windows
    t_from: float | None  # the first steady step: every group had committed twice
    why_none: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "samples_per_s": None if self.samples_per_s is None else round(self.samples_per_s, 3),
            "steady_s": round(self.steady_s, 3),
            "windows": self.windows,
            "steps": self.steps,
            "t_from": self.t_from,
            "why_none": self.why_none,
        }


def step_instants(final: dict[int, list[StepRecord]]) -> list[tuple[float, int]]:
    """(when its last group committed it, samples) per step of the final timeline, in time order."""
    return sorted((max(r.t for r in recs), sum(r.samples for r in recs)) for recs in final.values() if recs)


def disturbances(
    by_group: dict[int, list[StepRecord]], faults: Sequence[dict[str, Any]], t_end: float
) -> list[tuple[float, float]]:
    """The stretches a fault or an unexplained change of attempt disturbed, before settling (see the module)."""
    commits = {g: sorted((r for r in recs if r.committed), key=lambda r: r.t) for g, recs in by_group.items()}
    out: list[tuple[float, float]] = []
    for f in faults:
        start = f.get("t_injected")
        if start is None and f.get("t_detected") is not None:
            before = [r.t for r in commits.get(f["group"], []) if r.t <= f["t_detected"]]
            start = before[-1] if before else f["t_detected"]
        if start is None:
            continue
        back = f.get("t_first_commit_after")
        out.append((start, t_end if back is None else _all_committed_after(commits, back, t_end)))
    for recs in commits.values():
        for a, b in itertools.pairwise(recs):
            if a.attempt != b.attempt:
                out.append((a.t, b.t))
    return out


def _all_committed_after(commits: dict[int, list[StepRecord]], t: float, t_end: float) -> float:
    """When every group has committed at or after `t` (a group that never did: the run's end)."""
    firsts = [next((r.t for r in recs if r.t >= t), None) for recs in commits.values()]
    return t_end if any(x is None for x in firsts) else max(x for x in firsts if x is not None)


def steady_rate(
    by_group: dict[int, list[StepRecord]],
    final: dict[int, list[StepRecord]],
    faults: Sequence[dict[str, Any]],
    t_end: float,
) -> SteadyRate:
    """The fault-free rate of this run's steady windows (the module says which)."""
    steps = step_instants(final)
    seconds = [sorted(r.t for r in recs if r.committed)[1:2] for recs in by_group.values()]
    if not steps or not all(seconds):
        return SteadyRate(None, 0.0, 0, 0, None, "a group never committed twice")
    t_from = next((t for t, _ in steps if t >= max(s[0] for s in seconds)), None)
    if t_from is None:
        return SteadyRate(None, 0.0, 0, 0, None, "no step after every group had committed twice")
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(steps) if b > a]
    settle = SETTLE_STEPS * (statistics.median(gaps) if gaps else 0.0)
    cut = _merged([(a, b + settle) for a, b in disturbances(by_group, faults, t_end)])
    samples = counted = windows = 0
    span = 0.0
    for lo, hi in _complement(cut, t_from, steps[-1][0]):
        inside = [(t, n) for t, n in steps if lo <= t <= hi]
        if len(inside) < 2:
            continue
        windows += 1
        counted += len(inside) - 1
        samples += sum(n for _, n in inside[1:])
        span += inside[-1][0] - inside[0][0]
    if counted < MIN_STEADY_STEPS or span <= 0:
        why = f"{counted} steady steps (at least {MIN_STEADY_STEPS} measure a rate): faults left too little between"
        return SteadyRate(None, span, windows, counted, t_from, why)
    return SteadyRate(samples / span, span, windows, counted, t_from)


def steady_goodput(final: dict[int, list[StepRecord]], steady: SteadyRate) -> float | None:
    """Useful samples from the first steady step to the last commit, over the steady rate's in that time."""
    if steady.samples_per_s is None or steady.t_from is None:
        return None
    steps = step_instants(final)
    t_last = steps[-1][0]
    if t_last <= steady.t_from:
        return None
    useful = sum(n for t, n in steps if t > steady.t_from)
    return useful / (steady.samples_per_s * (t_last - steady.t_from))


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _complement(cut: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """[lo, hi] less the (merged, sorted) cut spans."""
    out: list[tuple[float, float]] = []
    at = lo
    for a, b in cut:
        if b <= at:
            continue
        if a > at:
            out.append((at, min(a, hi)))
        at = max(at, b)
        if at >= hi:
            break
    if at < hi:
        out.append((at, hi))
    return [(a, b) for a, b in out if b > a]
