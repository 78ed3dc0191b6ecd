"""What one fault costs, per kind and strategy, where faults do not overlap: bench/results/fault_cost.json.

One run per strategy delivers `n` faults of each kind, one at a time: each once the job is back at full
strength (every replica has committed, in a quorum of all of them, since the last fault) and has stayed so
for `settle_s`, so that the rate just before a fault is the job's full rate. A strategy that has not ended
the struck process itself within `cap_s` (the poll runner never replaces a hung group) is recorded as such,
and the harness then ends that process, as a repair would, so that the next fault finds the job whole (a
restart still under way is left alone, however slow). A
crashed node is started again once the job is whole (the repair of the node). Per fault, from the step logs:

- back_s: the struck replica commits again (a new process of it); for checkpoint-restart the whole job;
- stall_s: the longest gap between two commits of a replica the fault did not hit that holds the fault,
  minus that replica's step before it (checkpoint-restart: the whole job stops, so its other ranks too);
- whole_s: every replica commits in a quorum of all of them again (torchft: after the rejoin's quorum change);
- lost_job_s: the whole job's seconds lost, (whole_s) - (samples of new progress in that span) / (the job's
  samples/s over the `settle_s` before the fault): a group out costs its share, a stall everyone's, a
  rollback what is redone. Capped faults count to the cap.

This is what transfers to a real cluster, scaled by the fault rate and the group count (`lamplighter plan`).
"""

from __future__ import annotations

import functools
import itertools
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.fault_schedule import ScheduledFault
from bench.metrics import anatomy, committed
from bench.results_io import spread
from bench.runrecord import Fault, RunRecord
from bench.slurm_drive import JobView
from lamplighter.rundir.steplog import StepRecord

KINDS = ("kill", "hang", "hang-collective")


def sequence(kinds: tuple[str, ...], n: int, replicas: int) -> list[tuple[int, str]]:
    """(group, kind) in firing order: kinds interleaved, groups rotating, so no group takes every fault."""
    out = []
    for i in range(n):
        for j, kind in enumerate(kinds):
            out.append(((i + j) % replicas, kind))
    return out


def whole_since(job: JobView, after: float) -> float | None:
    """The time from which every replica has committed, in a quorum of all replicas, after `after` (None: not yet)."""
    firsts = []
    for i in range(job.replicas):
        t = next(
            (r.t for r in job.steps.records[i] if r.committed and r.t > after and r.participants == job.replicas), None
        )
        if t is None:
            return None
        firsts.append(t)
    return max(firsts)


# Each fault waits a further draw in [0, PHASE_S) after settling: the poll runner's 10 s cycle starts at a
# resubmission, so a fault a fixed settle after the job is whole again lands at the same point of every
# cycle (at f39fd4c, 2 s before the next poll: a kill's back_s 4.9-5.3 s against 8.8 in the goodput runs).
PHASE_S = 10.0
PHASE_SEED = 43


@dataclass
class OneAtATime:
    """A trigger for bench.slurm_drive: each fault once the job is whole and has been for settle_s, plus its
    phase (a seeded draw in [0, phase_s), the same list for every strategy)."""

    order: list[tuple[int, str]]
    settle_s: float
    cap_s: float
    repair: Callable[[], None] = lambda: None  # start crashed nodes again (blocking)
    phase_s: float = 0.0
    phases: list[float] = field(default_factory=list)
    next: int = 0
    last_t: float = 0.0
    released: bool = False
    done_after: float | None = None
    fired: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.phases:
            rng = random.Random(PHASE_SEED)
            self.phases = [rng.uniform(0.0, self.phase_s) for _ in self.order]

    def _whole(self, now: float, job: JobView) -> float | None:
        t = whole_since(job, self.last_t)
        if t is None:
            return None
        # Every replica still committing: a hang after the last fault is not "whole" on old commits.
        fresh = all(
            job.steps.last_commit(i) is not None and now - (job.steps.last_commit(i) or 0.0) < 3.0
            for i in range(job.replicas)
        )
        return t if fresh else None

    def due(self, now: float, t_first: float, job: JobView) -> ScheduledFault | None:
        if self.next >= len(self.order):
            return None
        since = self._whole(now, job) if self.next else t_first
        if since is None or now - since < self.settle_s + self.phases[self.next]:
            return None
        self.repair()
        group, kind = self.order[self.next]
        self.next += 1
        self.last_t, self.released = now, False
        self.fired.append(now)
        return ScheduledFault(round(now - t_first, 3), group, kind)

    def release(self, now: float, job: JobView) -> int | None:
        if not self.next or self.released or now - self.last_t < self.cap_s:
            return None
        if self._whole(now, job) is not None:
            return None
        self.released = True
        return self.order[self.next - 1][0]

    def finished(self, now: float, job: JobView) -> bool:
        if not self.next:
            return False
        since = self._whole(now, job)
        if since is None:
            # Not whole again long after the last fault, even after a release: the run ends with what it has.
            return now - self.last_t > 3 * self.cap_s
        return self.next >= len(self.order) and now - since >= self.settle_s


def progress_samples(recs: list[StepRecord], t0: float, t1: float) -> int:
    """Samples of the commits in (t0, t1] that move this replica past its highest step so far (no redone work)."""
    high = max((r.step for r in committed(recs) if r.t <= t0), default=0)
    total = 0
    for r in committed(recs):
        if t0 < r.t <= t1 and r.step > high:
            total += r.samples
            high = r.step
    return total


def rate(recs: list[StepRecord], t0: float, t1: float) -> int:
    """Samples of every commit in (t0, t1], redone or not: the job's pace."""
    return sum(r.samples for r in committed(recs) if t0 < r.t <= t1)


def longest_gap(recs: list[StepRecord], t0: float, t1: float) -> float | None:
    """The longest gap between two commits of this replica that overlaps [t0, t1], minus its usual step before t0."""
    c = committed(recs)
    before = [r.t for r in c if r.t <= t0]
    if len(before) < 3:
        return None
    normal = statistics.median(b - a for a, b in itertools.pairwise(before[-20:]))
    gaps = [b.t - a.t for a, b in itertools.pairwise(c) if b.t > t0 and a.t < t1]
    return max(0.0, max(gaps) - normal) if gaps else None


def first_commit_of_all(run: RunRecord, f: Fault, t0: float) -> float | None:
    """When every replica has committed in a quorum of all of them after t0 (the struck one: after its restart)."""
    whole = None
    for i, recs in run.steps.items():
        since = f.t_restarted if i == f.index and f.t_restarted is not None else t0
        t = next((r.t for r in committed(recs) if r.t > since and r.participants == run.replicas), None)
        if t is None:
            return None
        whole = t if whole is None else max(whole, t)
    return whole


def cost(run: RunRecord, f: Fault, settle_s: float, cap_s: float) -> dict[str, Any]:
    """One struck fault's cost (see the module docstring)."""
    t0 = f.t_injected
    a = anatomy(run, f)
    full_rate = sum(rate(recs, t0 - settle_s, t0) for recs in run.steps.values()) / settle_s
    whole = first_commit_of_all(run, f, t0)
    capped = f.released_at is not None
    back = None if capped or a["failed_commits_s"] is None else t0 + a["failed_commits_s"]
    # Work lost to a rollback is redone after the job is whole again: count until it passes its step at t0 too.
    progress = None if a["progress_s"] is None else t0 + a["progress_s"]
    end = f.released_at if capped else None if whole is None else max(whole, progress or whole)
    lost = None
    if end is not None and full_rate > 0:
        got = sum(progress_samples(recs, t0, end) for recs in run.steps.values())
        lost = (end - t0) - got / full_rate
    # The stall while the group is out, and the one its return brings (torchft's second quorum change).
    until = back if back is not None else (f.released_at if capped else None) or t0 + cap_s
    survivors = [recs for i, recs in run.steps.items() if i != f.index]
    stalls = [x for x in (longest_gap(recs, t0, until) for recs in survivors) if x is not None]
    rejoin = (
        [x for x in (longest_gap(recs, back + 1e-6, whole) for recs in survivors) if x is not None]
        if back is not None and whole is not None and whole > back
        else []
    )
    detected = a["detect_s"] if not capped or (a["detect_s"] or 0) < cap_s else None  # noticed after the release
    return {
        "kind": f.kind,
        "group": f.index,
        "t_injected": t0,
        "capped_at_s": round(f.released_at - t0, 3) if capped and f.released_at is not None else None,
        "detect_s": detected,
        "back_s": None if back is None else round(back - t0, 3),
        "stall_s": round(max(stalls), 3) if stalls else None,
        "rejoin_stall_s": round(max(rejoin), 3) if rejoin else None,
        "whole_s": None if capped or whole is None else round(whole - t0, 3),
        "lost_job_s": None if lost is None else round(lost, 3),
        "full_rate_samples_per_s": round(full_rate, 2),
    }


def summarize(costs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind and strategy: n, and median [range] of each measure; 'never' counts capped faults."""
    table: dict[str, Any] = {}
    for (kind, s), group in itertools.groupby(
        sorted(costs, key=lambda c: (c["kind"], c["strategy"])), key=lambda c: (c["kind"], c["strategy"])
    ):
        cs = list(group)
        cell: dict[str, Any] = {"n": len(cs), "never": sum(c["capped_at_s"] is not None for c in cs)}
        for key in ("detect_s", "back_s", "stall_s", "rejoin_stall_s", "whole_s", "lost_job_s"):
            vals = [c[key] for c in cs if c[key] is not None]
            cell[key] = spread(vals) if vals else None
        table.setdefault(kind, {})[s] = cell
    return table


def run_costs(
    bench: Any,
    strategies: tuple[str, ...],
    kinds: tuple[str, ...],
    n: int,
    settle_s: float,
    cap_s: float,
    log: Callable[[str], None] = print,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(per-fault costs, run summaries): one run per strategy on bench.goodput.Bench's clusters."""
    costs, runs = [], []
    for strategy in strategies:
        order = sequence(kinds, n, bench.w.replicas)
        nodes = bench.lamplighter_lab().cluster if strategy.startswith("lamplighter") else bench.cluster
        trigger = OneAtATime(order, settle_s, cap_s, repair=functools.partial(repair_nodes, nodes), phase_s=PHASE_S)
        t = time.monotonic()
        run = bench.one(
            strategy,
            trigger,
            window_s=60.0 * 60,  # the trigger ends the run once its last fault's recovery is in
            rep=0,
            seed=0,
            mtbf_s=None,
            ckpt_mtbf_s=30.0,
            tag=f"cost-{strategy}",
        )
        struck = [f for f in run.faults if f.outcome == "struck"]
        mine = [{"strategy": strategy, **cost(run, f, settle_s, cap_s)} for f in struck]
        costs += mine
        runs.append({"strategy": strategy, "faults": len(run.faults), "struck": len(struck), "record": run.summary()})
        log(f"[cost] {strategy}: {len(struck)} of {len(run.faults)} faults struck ({time.monotonic() - t:.0f} s)")
        for c in mine:
            log(f"[cost]   {c['kind']:<16} back {c['back_s']} stall {c['stall_s']} lost {c['lost_job_s']} job-s")
    return costs, runs


def repair_nodes(cluster: Any) -> None:
    """After a node crash: every node of the cluster started again and back in service."""
    from lamplighter.lab.testcluster import reset_nodes

    if not all(cluster.node_alive(n) for n in cluster.node_names):
        reset_nodes(cluster)
