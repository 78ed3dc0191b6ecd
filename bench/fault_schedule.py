"""The faults of one repetition: (time after the first commit, group, kind), the same list for every strategy.

Faults come from the hardware, whatever the software is doing, so they are drawn per replica group in
wall-clock time and never look at a strategy's state: each group gets one fault at a uniform moment of
every `group_mtbf_s`-long window (windows start at a random phase per group, so groups do not fail in
step), which keeps the count per run steady where exponential gaps left some short runs with two faults
and others with fifteen. Kinds are drawn from `kinds` (repeat a kind to weight it).

A live peer is kept by the schedule itself, not by the strategy under test: a fault that would make every
group hit within `guard_s` (the slowest recovery of lamplighter's) is dropped, and the schedule counts
the drops. Everything here is pure: the same arguments always give the same faults.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

START_AFTER_S = 3.0  # no fault in the first seconds of training: the job's rate is measured from there


@dataclass(frozen=True)
class ScheduledFault:
    t: float  # seconds after the run's first committed step
    group: int  # replica group (a DDP rank for checkpoint-restart)
    kind: str


@dataclass(frozen=True)
class Schedule:
    faults: tuple[ScheduledFault, ...]
    guard_dropped: int  # drawn, but would have hit every group within guard_s
    params: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "faults": [asdict(f) for f in self.faults],
            "guard_dropped": self.guard_dropped,
            **self.params,
        }


def draw(
    seed: int,
    groups: int,
    kinds: list[str],
    window_s: float,
    group_mtbf_s: float,
    guard_s: float,
    start_s: float = START_AFTER_S,
) -> Schedule:
    """The repetition's faults in [start_s, window_s), in time order (see the module docstring)."""
    if groups < 2 or not kinds or group_mtbf_s <= 0 or window_s <= start_s:
        raise ValueError(
            f"a schedule needs 2+ groups, kinds, a positive MTBF and a window past {start_s} s "
            f"(got {groups} groups, kinds {kinds}, MTBF {group_mtbf_s} s, window {window_s} s)"
        )
    rng = random.Random(seed)
    drawn: list[ScheduledFault] = []
    for g in range(groups):
        phase = rng.random() * group_mtbf_s
        begin = start_s + phase - group_mtbf_s  # the first window straddles start_s
        while begin < window_s:
            t = begin + rng.random() * group_mtbf_s
            kind = rng.choice(kinds)
            if start_s <= t < window_s:
                drawn.append(ScheduledFault(round(t, 3), g, kind))
            begin += group_mtbf_s
    drawn.sort(key=lambda f: (f.t, f.group))
    kept = guard(drawn, groups, guard_s)
    params = {
        "seed": seed,
        "groups": groups,
        "kinds": kinds,
        "window_s": window_s,
        "group_mtbf_s": group_mtbf_s,
        "guard_s": guard_s,
        "start_s": start_s,
    }
    return Schedule(tuple(kept), len(drawn) - len(kept), params)


def guard(faults: list[ScheduledFault], groups: int, guard_s: float) -> list[ScheduledFault]:
    """The faults, in time order, without each one that would leave no group unhit within guard_s."""
    kept: list[ScheduledFault] = []
    for f in faults:
        recent = {k.group for k in kept if k.t > f.t - guard_s} | {f.group}
        if len(recent) < groups:
            kept.append(f)
    return kept


def all_hit_within(faults: list[ScheduledFault] | tuple[ScheduledFault, ...], groups: int, span_s: float) -> bool:
    """Whether some span_s-long stretch holds a fault on every group (what the guard rules out)."""
    return any(len({k.group for k in faults[: i + 1] if k.t > f.t - span_s}) >= groups for i, f in enumerate(faults))
