"""The run report: what was committed, what was lost, whether replicas agree, and what each fault cost.

Definitions (all from the groups' step logs, StepRecord, and the fault journal):

steps_committed
    The highest step any group committed.
target_steps
    The job's final target: trainer.steps (configured_steps), or the step
    its owner told the running job to stop at (`<run_dir>/stop-at`,
    rundir/stop_at.py; stop_at) when that is smaller.
reached_target
    steps_committed >= target_steps, in the trainer's own counting when its
    step log carries one (trainer_steps: torchtitan counts attempted steps,
    so a job that ran trainer.steps steps with one failed commit has
    committed one torchft step fewer, and has still reached its target).
steps_lost
    The number of distinct step numbers that were committed and then rolled
    back. Step s counts as lost when (a) a group commits step j after having
    committed a step >= j itself (it went back: steps j..its previous maximum
    were redone), or (b) step s was committed under two different quorum ids
    (two timelines committed the same step). A healed group jumps forward to
    its peer's step, so healing never counts. Must be 0. Steps redone after a
    group loaded the fallback checkpoint (no live peer held the state; the
    trainer logs healed_from "checkpoint:N") are not lost but counted apart:
steps_redone_from_fallback
    N+1 up to the highest step committed before each such load.
weights_identical
    For every step of the final timeline (its last commit: final_commits)
    committed by more than one group, all their state hashes
    (model + optimizer + data cursor) are equal, and every heal was checked:
    the healed group and another group both hashed a step at or after the
    heal, in the healed attempt. False on any mismatch. None when the trainer
    logs no state hash (steps read from the Lighthouse) or a heal had no step
    to compare: not checked, never a vacuous true.
t_first_commit_after
    The first committed step of the fault's group after its restart, by an
    attempt whose first commit came after the restart (never a late row of
    the attempt the fault ended); for a Lighthouse fault, of any group after
    the Lighthouse's restart.
steps_compared_after
    Per fault: the steps its group committed after its restart, in the new
    attempt (any group's, after a Lighthouse restart), whose state hash
    another group committed too: how many steps checked that heal.
survivor_stall_s
    For each group the fault did not hit (every group for a Lighthouse fault),
    the longest gap between two of its consecutive commits that overlaps
    [t_injected, t_first_commit_after], minus that group's normal step time
    (the median gap between its commits over the run); the maximum over
    those groups, at least 0. Gaps in which the group was itself down (the
    two commits come from different attempts, or a fault aimed at that group
    was injected between them) do not count. None when no group qualifies.
useful_samples_per_s
    Samples of the final timeline per second, from the first commit to the
    last: each step number counts once, with the groups of the quorum that
    committed it last; steps redone (after a fallback checkpoint, or a
    timeline that went back) count once, not twice.
steady_samples_per_s, steady
    The fault-free rate of this run's own steady windows: every group in, no
    fault open (steady_rate.py says which stretches count); `steady` holds
    how many seconds, windows and steps it was measured over, or why none.
goodput
    The useful samples from the first steady step to the last commit over
    what the steady rate would have trained in that time: 1.0 with nothing
    failing. Measured in one run, so that the machine's load between two
    runs cannot move it. None when the faults left too little steadiness.
goodput_vs_fault_free_run
    useful_samples_per_s over the rate of a fault-free run of the same job
    (`lamplighter local --baseline`: a number, a fault-free run's
    report.json, or `auto` to run one first): fault_free_samples_per_s,
    from fault_free_source. None without one.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lamplighter.report.fault_journal import FaultRecord
from lamplighter.report.steady_rate import steady_goodput, steady_rate
from lamplighter.rundir.steplog import StepRecord
from lamplighter.rundir.stop_at import final_target


def committed(records: Sequence[StepRecord]) -> list[StepRecord]:
    return sorted((r for r in records if r.committed), key=lambda r: (r.t, r.step))


def fallback_redone(by_group: dict[int, list[StepRecord]]) -> set[int]:
    """Steps redone because a group loaded the fallback checkpoint (the trainer announces it as
    healed_from "checkpoint:N", and only does so when no live peer held the state): N+1 up to the
    highest step the job had committed before that load. The load's own record may be uncommitted
    (its first step after the load failed): it still announces it."""
    every = [r for recs in by_group.values() for r in committed(recs)]
    redone: set[int] = set()
    for t_load, ck_step in fallback_loads(by_group):
        before = max((r.step for r in every if r.t < t_load), default=0)
        redone.update(range(ck_step + 1, before + 1))
    return redone


def lost_steps(by_group: dict[int, list[StepRecord]]) -> set[int]:
    """Step numbers committed and then rolled back (see the module docstring), less those redone from
    the fallback checkpoint (fallback_redone: counted apart, never silently)."""
    return rolled_back(by_group) - fallback_redone(by_group)


def rolled_back(by_group: dict[int, list[StepRecord]]) -> set[int]:
    lost: set[int] = set()
    quorums: dict[int, set[int]] = {}
    for recs in by_group.values():
        high = 0
        for r in committed(recs):
            if r.step <= high:
                lost.update(range(r.step, high + 1))
            high = r.step
            quorums.setdefault(r.step, set()).add(r.quorum_id)
    lost.update(s for s, q in quorums.items() if len(q) > 1)
    return lost


def fallback_loads(by_group: dict[int, list[StepRecord]]) -> list[tuple[float, int]]:
    """(time, checkpoint step) of each fallback-checkpoint load the trainers announced."""
    out = []
    for recs in by_group.values():
        for r in recs:
            if (r.healed_from or "").startswith("checkpoint:"):
                try:
                    out.append((r.t, int(str(r.healed_from).split(":", 1)[1])))
                except ValueError:
                    continue
    return out


def final_commits(by_group: dict[int, list[StepRecord]]) -> dict[int, list[StepRecord]]:
    """Each step's records of its last commit (the quorum that committed it last): the final timeline.

    A step committed twice was rolled back in between (redone from the fallback checkpoint, or lost):
    its first commit's hashes describe a timeline that no longer exists. A commit a later fallback load
    went back past is superseded even when its redo got the same quorum id: a restarted Lighthouse
    numbers its quorums from 1 again."""
    loads = fallback_loads(by_group)
    by_commit: dict[tuple[int, int], list[StepRecord]] = {}
    for recs in by_group.values():
        for r in committed(recs):
            if any(t > r.t and ck < r.step for t, ck in loads):
                continue
            by_commit.setdefault((r.step, r.quorum_id), []).append(r)
    final: dict[int, list[StepRecord]] = {}
    for (step, _q), recs in by_commit.items():
        if step not in final or max(r.t for r in recs) > max(r.t for r in final[step]):
            final[step] = recs
    return final


def hash_mismatches(by_group: dict[int, list[StepRecord]]) -> list[dict[str, Any]]:
    """Steps of the final timeline where the groups that committed them disagree on the state hash."""
    hashes: dict[int, dict[int, str]] = {}
    for step, recs in final_commits(by_group).items():
        for r in recs:
            hashes.setdefault(step, {})[r.replica_id] = r.state_hash
    return [
        {"step": s, "hashes": {str(g): h for g, h in hs.items()}}
        for s, hs in sorted(hashes.items())
        if len(set(hs.values())) > 1
    ]


def unchecked_heals(by_group: dict[int, list[StepRecord]]) -> list[tuple[int, int]]:
    """(group, step) of each heal after which no step of the healed attempt was compared with another group."""
    hashed_by: dict[int, set[int]] = {}
    for g, recs in by_group.items():
        for r in committed(recs):
            if r.state_hash:
                hashed_by.setdefault(r.step, set()).add(g)
    out = []
    for g, recs in sorted(by_group.items()):
        mine = [r for r in committed(recs) if r.state_hash]
        for heal in (r for r in committed(recs) if r.healed_from):
            after = (r.step for r in mine if r.attempt == heal.attempt and r.step >= heal.step)
            if not any(hashed_by.get(s, set()) - {g} for s in after):
                out.append((g, heal.step))
    return out


def shared_steps(by_group: dict[int, list[StepRecord]]) -> int:
    counts: dict[int, int] = {}
    for recs in by_group.values():
        for r in committed(recs):
            counts[r.step] = counts.get(r.step, 0) + 1
    return sum(1 for c in counts.values() if c > 1)


def first_commit_after(
    by_group: dict[int, list[StepRecord]], group: int | None, t: float | None, until: float | None = None
) -> float | None:
    """The first commit after `t`; for a group's fault, by an attempt of that group that first committed after `t`
    (or by its only attempt, when the restart kept the attempt number).

    A row of the attempt the fault ended can still come after its restart (the Lighthouse's status lags the
    kill by a sample), and timed recovery from the old attempt's own step ("first commit 0.00 s after restart").
    """
    if t is None:
        return None
    if group is None:  # the Lighthouse's restart: any group's next commit
        times = [r.t for recs in by_group.values() for r in committed(recs) if r.t > t]
        return min(times) if times else None
    recs = committed(by_group.get(group, []))
    born: dict[int, float] = {}
    for r in recs:
        born.setdefault(r.attempt, r.t)
    # A group restarted in place under the same attempt (a bare-metal host within its lease epoch) has no new
    # attempt to wait for: its rows after `t` are the new process's (the old one was dead by then). A new attempt
    # born only after the group's next fault (`until`) belongs to that fault, not to this restart.
    renewed = any(t < b < (until if until is not None else float("inf")) for b in born.values())
    times = [r.t for r in recs if r.t > t and (born[r.attempt] > t or not renewed)]
    return min(times) if times else None


def compared_after(by_group: dict[int, list[StepRecord]], group: int | None, t: float | None) -> int:
    """Steps, committed after `t` by the fault's group in a new attempt (any group for a Lighthouse fault),
    whose state hash another group also committed: how much the heal was checked by."""
    if t is None:
        return 0
    hashed: dict[int, set[int]] = {}
    for g, recs in by_group.items():
        for r in committed(recs):
            if r.state_hash:
                hashed.setdefault(r.step, set()).add(g)
    if group is None:
        # The last commit of each (group, step), read once: per step and group it was a sort of every record
        # (a 100-fault soak's report took minutes).
        last: dict[tuple[int, int], float] = {}
        for g, recs in by_group.items():
            for r in committed(recs):
                last[(g, r.step)] = max(last.get((g, r.step), 0.0), r.t)
        return sum(1 for s, gs in hashed.items() if len(gs) > 1 and any(last.get((g, s), 0.0) > t for g in gs))
    recs = [r for r in committed(by_group.get(group, [])) if r.state_hash]
    born: dict[int, float] = {}
    for r in committed(by_group.get(group, [])):
        born.setdefault(r.attempt, r.t)
    return sum(1 for r in recs if r.t > t and born[r.attempt] > t and hashed.get(r.step, set()) - {group})


def normal_step_s(recs: Sequence[StepRecord]) -> float | None:
    ts = [r.t for r in committed(recs)]
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    return statistics.median(gaps) if gaps else None


def survivor_stall(
    by_group: dict[int, list[StepRecord]],
    fault: FaultRecord,
    until: float | None,
    all_faults: Sequence[FaultRecord] = (),
) -> float | None:
    if fault.t_injected is None:
        return None
    start = fault.t_injected
    end = until if until is not None else start
    worst: float | None = None
    # Once the faulted group commits again, a stall that a later fault starts is that fault's, even when the
    # survivors' last commit before it fell inside this window (`make demo-bare` strikes within a step).
    later = [f.t_injected for f in all_faults if f.t_injected is not None and f.t_injected > end]
    for g, recs in by_group.items():
        if fault.group is not None and g == fault.group:
            continue
        # A group down for a fault of its own in the window is not a survivor of this one.
        own = [f.t_injected for f in all_faults if f.group == g and f.t_injected is not None]
        not_this = own + later  # a gap holding one of these is another fault's
        normal = normal_step_s(recs)
        c = committed(recs)
        gaps = [
            b.t - a.t
            for a, b in itertools.pairwise(c)
            if b.t >= start and a.t <= end and a.attempt == b.attempt and not any(a.t < t <= b.t for t in not_this)
        ]
        if normal is None or not gaps:
            continue
        stall = max(0.0, max(gaps) - normal)
        worst = stall if worst is None else max(worst, stall)
    return worst


@dataclass(frozen=True)
class Throughput:
    samples: int
    seconds: float

    @property
    def rate(self) -> float | None:
        return self.samples / self.seconds if self.seconds > 0 else None


def throughput(by_group: dict[int, list[StepRecord]]) -> Throughput:
    """Committed samples between the first and the last commit."""
    return _over_the_run(by_group, [r for recs in by_group.values() for r in committed(recs)])


def useful_throughput(by_group: dict[int, list[StepRecord]]) -> Throughput:
    """Samples of the final timeline between the first and the last commit (see useful_samples_per_s)."""
    return _over_the_run(by_group, [r for recs in final_commits(by_group).values() for r in recs])


def _over_the_run(by_group: dict[int, list[StepRecord]], counted: list[StepRecord]) -> Throughput:
    times = [r.t for recs in by_group.values() for r in committed(recs)]
    if len(times) < 2:
        return Throughput(0, 0.0)
    first = min(times)
    # Samples of the first commit instant fall before the measured interval.
    return Throughput(sum(r.samples for r in counted if r.t > first), max(times) - first)


def _span(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 3)


def build_report(
    by_group: dict[int, list[StepRecord]],
    faults: Sequence[FaultRecord],
    *,
    target_steps: int,
    t_start: float,
    t_end: float,
    baseline_samples_per_s: float | None = None,
    baseline_source: str = "given",
    stop_at: int | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report; `target_steps` is trainer.steps, `stop_at` the owner's stop step if the run dir held one."""
    fault_rows: list[dict[str, Any]] = []
    for f in faults:
        restart_ref = f.t_restarted
        later = [
            g.t_injected
            for g in faults
            if g.group == f.group
            and g.t_injected is not None
            and f.t_injected is not None
            and g.t_injected > f.t_injected
        ]
        t_first = first_commit_after(by_group, f.group, restart_ref, min(later, default=None))
        fault_rows.append(
            {
                **f.to_json(),
                "t_first_commit_after": t_first,
                "late_s": _span(f.t_planned, f.t_injected),
                "detection_latency_s": _span(f.t_injected, f.t_detected),
                "restart_after_detection_s": _span(f.t_detected, f.t_restarted),
                "first_commit_after_restart_s": _span(f.t_restarted, t_first),
                "recovery_s": _span(f.t_injected, t_first),
                "survivor_stall_s": None
                if f.kind == "unplanned"
                else _round(survivor_stall(by_group, f, t_first, faults)),
                "steps_compared_after": compared_after(by_group, f.group, restart_ref),
            }
        )
    lost = lost_steps(by_group)
    redone = fallback_redone(by_group)
    mismatches = hash_mismatches(by_group)
    hashed = any(r.state_hash for recs in by_group.values() for r in committed(recs))
    compared = shared_steps(by_group) if hashed else 0
    unchecked = unchecked_heals(by_group) if hashed else []
    overall = throughput(by_group)
    useful = useful_throughput(by_group)
    base = baseline_samples_per_s
    final = final_commits(by_group)
    steady = steady_rate(by_group, final, fault_rows, t_end)
    good = steady_goodput(final, steady)
    against_run = useful.rate / base if useful.rate is not None and base else None
    steps = max((r.step for recs in by_group.values() for r in committed(recs)), default=0)
    own = [r.trainer_step for recs in by_group.values() for r in committed(recs) if r.trainer_step is not None]
    trainer_steps = max(own) if own else None
    target = final_target(target_steps, stop_at)
    report: dict[str, Any] = {
        "steps_committed": steps,
        "trainer_steps": trainer_steps,
        "target_steps": target,
        "reached_target": (steps if trainer_steps is None else trainer_steps) >= target,
        "configured_steps": target_steps,
        "stop_at": stop_at,
        "steps_lost": len(lost),
        "lost_step_numbers": sorted(lost)[:100],
        "steps_redone_from_fallback": len(redone),
        "weights_identical": _identical(hashed, mismatches, unchecked),
        "weights_check": _weights_check(hashed, compared, unchecked),
        "steps_compared": compared,
        "hash_mismatches": mismatches[:20],
        "faults": fault_rows,
        "by_kind": summarize_by_kind(fault_rows),
        "survivor_stall_s": [row["survivor_stall_s"] for row in fault_rows],
        "committed_samples_per_s": _round(overall.rate),
        "useful_samples_per_s": _round(useful.rate),
        "steady_samples_per_s": _round(steady.samples_per_s),
        "steady": steady.to_json(),
        "goodput": _round(good),
        "fault_free_samples_per_s": _round(base),
        "fault_free_source": baseline_source if base is not None else None,
        "goodput_vs_fault_free_run": _round(against_run),
        "t_start": t_start,
        "t_end": t_end,
        "wall_s": round(t_end - t_start, 3),
        "groups": {str(g): group_summary(recs) for g, recs in sorted(by_group.items())},
    }
    report.update(extra or {})
    return report


def _identical(hashed: bool, mismatches: list[dict[str, Any]], unchecked: list[tuple[int, int]]) -> bool | None:
    if not hashed:
        return None
    if mismatches:
        return False
    return None if unchecked else True


def _weights_check(hashed: bool, compared: int, unchecked: list[tuple[int, int]]) -> str:
    if not hashed:
        return "not checked (the trainer logs no state hash)"
    text = f"state hashes compared on {compared} shared steps"
    if unchecked:
        heals = ", ".join(f"group {g} at step {s}" for g, s in unchecked[:5])
        text += f"; no step compared after the heal of {heals}"
    return text


def run_ok(report: dict[str, Any]) -> bool:
    """The run's verdict: target reached, nothing lost, and no disagreement between replicas that was checked."""
    return bool(report["reached_target"]) and report["steps_lost"] == 0 and report["weights_identical"] is not False


def group_summary(recs: Sequence[StepRecord]) -> dict[str, Any]:
    c = committed(recs)
    return {
        "steps_committed": len(c),
        "last_step": c[-1].step if c else 0,
        "last_loss": c[-1].loss if c else None,
        "attempts": len({r.attempt for r in recs}),
        "heals": sum(1 for r in c if r.healed_from),
        "normal_step_s": _round(normal_step_s(recs)),
    }


def summarize_by_kind(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per fault kind: count, and mean/max of each latency, for the closing note."""
    out: dict[str, dict[str, Any]] = {}
    keys = ("detection_latency_s", "first_commit_after_restart_s", "recovery_s", "survivor_stall_s")
    for kind in sorted({r["kind"] for r in rows}):
        mine = [r for r in rows if r["kind"] == kind]
        entry: dict[str, Any] = {"count": len(mine), "recovered": sum(1 for r in mine if r["t_first_commit_after"])}
        for k in keys:
            vals = [r[k] for r in mine if r[k] is not None]
            entry[k] = {"mean": _round(statistics.fmean(vals)), "max": _round(max(vals))} if vals else None
        out[kind] = entry
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
