"""Run one Slurm-based strategy to its target step while injecting a fault schedule.

Every strategy sees the same faults at the same times after its first
committed step. As in lamplighter's chaos injector, a fault hits a replica
that has committed since it last started and since it was last hurt (a hung
replica keeps its process until the strategy notices) while another healthy replica is
left (the target is picked by the same rule, lamplighter.supervisor.chaos.
pick_group), and waits while there is none; but at most one fault waits: one
that falls due while the job is still recovering and the next is due too is
dropped (it landed on a job that was down anyway), so a slow recovery does
not meet a backlog of faults the moment it is healthy. The driver only
injects and watches; recovering is the strategy's business (its `tick`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bench.procs import find_trainers, hurt, node_of, release
from bench.runrecord import Fault, RunRecord, StepFollower
from lamplighter.lab.testcluster import wait_until
from lamplighter.supervisor.chaos import PlannedFault, pick_group

TICK_S = 0.1
PROC_SCAN_S = 0.3  # /proc scans cost CPU on a busy 2-core machine
SETTLE_S = 120.0
STARTUP_S = 180.0  # a strategy whose first commit takes longer is stopped


class SlurmStrategy(Protocol):
    name: str
    replicas: int
    run_dir: Path
    run_id: str
    # Times the strategy noticed a failure, with the replica it blames (None: the whole job).
    detections: list[tuple[float, int | None]]
    extra: dict[str, int]  # counts the strategy adds to the run's record (lamplighter: warm and cold starts)

    def start(self) -> None: ...

    def tick(self, now: float) -> None: ...

    def stop(self) -> None: ...

    # After the run: wait until nothing the strategy started still uses the CPU (the next run's baseline).
    def settle(self) -> None: ...


def drive(
    strategy: SlurmStrategy,
    planned: list[PlannedFault],
    *,
    seed: int,
    target: int,
    timeout_s: float,
    mtbf_s: float | None,
    rep: int,
    crash_node: Callable[[str], None] | None = None,
    until_recovered: bool = False,
) -> RunRecord:
    """One run, to `target` or to `timeout_s` seconds of training after the first commit (the fault schedule's
    clock), whichever comes first; a strategy without a commit after STARTUP_S is stopped."""
    steps = StepFollower(strategy.run_dir, strategy.replicas)
    injector = Injector(planned, seed)
    faults: list[Fault] = []
    highs: list[int] = []  # the job's highest committed step when each fault hit
    starts: dict[int, list[float]] = {i: [] for i in range(strategy.replicas)}
    current: dict[int, int] = {}  # replica -> host pid of its live trainer
    started_at: dict[int, float] = {}
    hurt_at: dict[int, float] = {}
    t_start = time.time()
    strategy.start()
    # The harness's own setup (resetting the lab between runs) is not the strategy's: its clock starts after.
    t_start += getattr(strategy, "setup_s", 0.0)
    t_train: float | None = None
    next_scan = 0.0
    reached = False
    try:
        while True:
            now = time.time()
            strategy.tick(now)
            steps.poll()
            if now >= next_scan:
                next_scan = now + PROC_SCAN_S
                found = find_trainers(strategy.run_id)
                for i, pid in found.items():
                    if current.get(i) != pid:
                        starts[i].append(now)
                        started_at[i] = now
                current = found
            if steps.max_step() >= target:
                reached = True
                break
            if (
                until_recovered
                and not injector.remaining
                and faults
                and all(recovered(f, steps, started_at) for f in faults)
                and steps.max_step() > max(highs)
            ):
                reached = True
                break
            if out_of_time(now, t_start, t_train, timeout_s):
                break
            if t_train is None:
                t_train = steps.first_commit()
            if t_train is not None:
                healthy = healthy_replicas(list(current), steps.last_commit, started_at, hurt_at, now)
                kill_lh = getattr(strategy, "kill_lighthouse", None)
                shot = injector.due(now - t_train, sorted(healthy), kill_lh is not None and bool(healthy))
                if shot is not None:
                    t_hit = time.time()
                    if shot.fault.kind == "lighthouse-kill":
                        assert kill_lh is not None
                        kill_lh()
                    elif shot.fault.kind == "node-crash":
                        node = node_of(current[shot.group])
                        crash_node = getattr(strategy, "crash_node", crash_node)
                        if crash_node is None or node is None:
                            raise RuntimeError(f"cannot crash the node of replica {shot.group} (node {node})")
                        crash_node(node)
                    else:
                        hurt(current[shot.group], shot.fault.kind)
                    index = None if shot.fault.kind == "lighthouse-kill" else shot.group
                    if index is not None:
                        hurt_at[index] = t_hit
                    faults.append(Fault(kind=shot.fault.kind, index=index, t_injected=t_hit))
                    highs.append(steps.max_step())
            time.sleep(TICK_S)
    finally:
        t_end = time.time()
        strategy.stop()
        release(list(find_trainers(strategy.run_id).values()))
        # Leftovers of this run would slow the next run (on 2 cores a standby's refill, importing torch, is
        # half the machine): checkpoint-restart right after lamplighter trained 9 steps in its first 3.6-3.9 s,
        # against 15-16 in 4.2-4.7 s otherwise (the run at 3228352, before this wait).
        wait_until(lambda: not find_trainers(strategy.run_id), SETTLE_S, f"{strategy.name}'s trainers to exit")
        strategy.settle()
    steps.poll()
    attribute_detections(faults, strategy.detections)
    lh_starts = getattr(strategy, "lighthouse_starts", [])
    for f in faults:
        again = starts[f.index] if f.index is not None else lh_starts
        f.t_restarted = next((t for t in again if t > f.t_injected), None)
        if f.t_detected is None and f.t_restarted is not None:
            f.t_detected = f.t_restarted  # restarted by something that logs no action (systemd for the Lighthouse)
    return RunRecord(
        strategy=strategy.name,
        mtbf_s=mtbf_s,
        rep=rep,
        seed=seed,
        target_steps=target,
        replicas=strategy.replicas,
        t_start=t_start,
        t_end=t_end,
        reached=reached,
        substrate="slurm",
        faults=faults,
        starts=starts,
        steps=steps.records,
        extra={"faults_not_injected": injector.remaining, "faults_dropped": injector.dropped, **strategy.extra},
    )


def out_of_time(now: float, t_start: float, t_train: float | None, budget_s: float) -> bool:
    """The budget counts training from the first commit, so a slow start-up does not shorten a run's
    exposure to the faults; before the first commit, only STARTUP_S bounds it."""
    return now - t_start > STARTUP_S if t_train is None else now - t_train > budget_s


def healthy_replicas(
    live: list[int],
    last_commit: Callable[[int], float | None],
    started_at: dict[int, float],
    hurt_at: dict[int, float],
    now: float,
) -> list[int]:
    """Replicas that committed since they last started and since they were last hurt.

    A hung trainer keeps its process and its old commits until the strategy notices: without the
    second condition the next fault could take the one replica still training, and no live peer is left.
    """
    return sorted(
        i for i in live if (last_commit(i) or 0.0) > max(started_at.get(i, now), hurt_at.get(i, float("-inf")))
    )


@dataclass(frozen=True)
class Shot:
    fault: PlannedFault
    group: int


class Injector:
    """Which planned fault to inject now, and at whom (see the module docstring)."""

    def __init__(self, planned: list[PlannedFault], seed: int) -> None:
        self.planned, self.seed, self.next, self.dropped = planned, seed, 0, 0

    @property
    def remaining(self) -> int:
        return len(self.planned) - self.next

    def due(self, elapsed_s: float, healthy: list[int], lighthouse_ok: bool) -> Shot | None:
        while self.next < len(self.planned) and self.planned[self.next].at_s <= elapsed_s:
            f = self.planned[self.next]
            ok = lighthouse_ok if f.kind == "lighthouse-kill" else len(healthy) >= 2
            if ok:
                self.next += 1
                group = (
                    -1
                    if f.kind == "lighthouse-kill"
                    else f.group
                    if f.group is not None
                    else (pick_group(healthy, self.next - 1, self.seed))
                )
                return Shot(f, group)
            later_due = self.next + 1 < len(self.planned) and self.planned[self.next + 1].at_s <= elapsed_s
            if not later_due:
                return None  # wait for a healthy target
            self.next += 1
            self.dropped += 1
        return None


def recovered(f: Fault, steps: StepFollower, started_at: dict[int, float]) -> bool:
    """The fault's replica (every replica, for a Lighthouse fault) committed again since it was hit and restarted."""
    who = list(steps.records) if f.index is None else [f.index]
    # A Lighthouse fault: the step in flight may still commit; ask for commits well after it.
    since = {i: max(f.t_injected + (3.0 if f.index is None else 0.0), started_at.get(i, 0.0)) for i in who}
    return all((steps.last_commit(i) or 0.0) > since[i] for i in who)


def attribute_detections(faults: list[Fault], detections: list[tuple[float, int | None]]) -> None:
    """Each fault's detection: the strategy's first notice after it, about its replica (or the whole job)."""
    for f in faults:
        later = [t for t, who in detections if t >= f.t_injected and (who is None or who == f.index)]
        f.t_detected = min(later) if later else None
