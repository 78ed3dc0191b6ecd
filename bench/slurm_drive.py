"""Run one Slurm-based strategy for a window of training while delivering its faults exactly.

The run starts the strategy, waits for its first committed step, and from then on delivers each fault
its trigger names at that moment, whatever state the target is in (bench/delivery.py decides struck or
absorbed; this carries it out), until `window_s` seconds after the first commit: there is no step
target, so every run of a repetition is exposed to the same faults for the same time. The goodput runs'
trigger is the repetition's schedule (Timed); the per-fault runs' fires each fault once the job is back
at full strength (bench/fault_cost.py). The driver only injects and watches: recovering is the
strategy's business (its `tick`).
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bench.delivery import ABSORBED, Target, decide
from bench.fault_schedule import ScheduledFault
from bench.procs import find_trainers, is_stopped, node_of, release, signal_pid
from bench.runrecord import Fault, RunRecord, StepFollower
from lamplighter.lab.testcluster import wait_until
from lamplighter.rundir.contract import RunPaths

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
    extra: dict[str, int]  # counts the strategy adds to the run's record

    def start(self) -> None: ...

    def tick(self, now: float) -> None: ...

    def stop(self) -> None: ...

    # After the run: wait until nothing the strategy started still uses the CPU (the next run's baseline).
    def settle(self) -> None: ...


class Nodes(Protocol):
    """What a node-crash needs of the cluster a strategy runs on (lamplighter.lab.testcluster.TestCluster)."""

    def crash_node(self, name: str) -> None: ...


@dataclass
class JobView:
    """What the driver knows at a moment: triggers read it."""

    replicas: int
    steps: StepFollower
    pids: dict[int, int] = field(default_factory=dict)  # replica -> host PID of its live trainer
    started_at: dict[int, float] = field(default_factory=dict)  # replica -> when its current process appeared
    faults: list[Fault] = field(default_factory=list)


class Trigger(Protocol):
    def due(self, now: float, t_first: float, job: JobView) -> ScheduledFault | None:
        """The fault to deliver now, if any."""
        ...

    def release(self, now: float, job: JobView) -> int | None:
        """A replica whose stuck process the harness must end now (a per-fault run's cap), if any: the driver
        ends the process the last fault struck, if it still runs (a strategy's slow restart is left alone)."""
        ...

    def finished(self, now: float, job: JobView) -> bool:
        """The run has what it came for (before its window ends)."""
        ...


class Timed:
    """A schedule's faults, each at its time after the first commit."""

    def __init__(self, faults: tuple[ScheduledFault, ...] | list[ScheduledFault]) -> None:
        self.faults, self.next = list(faults), 0

    def due(self, now: float, t_first: float, job: JobView) -> ScheduledFault | None:
        if self.next < len(self.faults) and now - t_first >= self.faults[self.next].t:
            self.next += 1
            return self.faults[self.next - 1]
        return None

    def release(self, now: float, job: JobView) -> int | None:
        return None

    def finished(self, now: float, job: JobView) -> bool:
        return False


class Courier:
    """Carries out bench.delivery's decisions on one run's processes, and follows its hang-collective files."""

    def __init__(self, run_dir: Path, run_id: str, nodes: Nodes | None) -> None:
        self.paths, self.run_id, self.nodes = RunPaths(run_dir), run_id, nodes
        self.blocked: set[int] = set()  # PIDs a hang-collective of ours holds
        self.pending: dict[int, tuple[int, Path]] = {}  # fault index -> (PID, inject file) not yet taken
        self.crashed: list[str] = []

    def deliver(self, f: ScheduledFault, job: JobView) -> Fault:
        pid = job.pids.get(f.group)
        waiting = {p for p, _ in self.pending.values()}
        target = Target(pid, pid is not None and is_stopped(pid), pid in self.blocked or pid in waiting)
        d = decide(f.kind, target)
        outcome, why = d.outcome, d.why
        t_hit = time.time()
        if d.action == "sigkill" or d.action == "sigstop":
            assert pid is not None
            if not signal_pid(pid, signal.SIGKILL if d.action == "sigkill" else signal.SIGSTOP):
                outcome, why = ABSORBED, "the group's process ended as the fault came"
        elif d.action == "hang-collective":
            assert pid is not None
            path = self.paths.inject_hang_collective(f.group)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("bench\n")  # the trainer blocks inside its next step (it removes the file first)
            self.pending[len(job.faults)] = (pid, path)
        elif d.action == "crash-node":
            assert pid is not None
            node = node_of(pid)
            if self.nodes is None or node is None:
                raise RuntimeError(f"cannot crash the node of replica {f.group} (pid {pid}, node {node})")
            self.nodes.crash_node(node)
            self.crashed.append(node)
        return Fault(kind=f.kind, index=f.group, t_injected=t_hit, t_scheduled=f.t, outcome=outcome, why=why, pid=pid)

    def follow(self, faults: list[Fault], live: set[int]) -> None:
        """A taken file blocks its process; one whose process ended first never struck (and must not strike the
        group's next process)."""
        for i, (pid, path) in list(self.pending.items()):
            if not path.exists():
                self.blocked.add(pid)
                del self.pending[i]
            elif pid not in live:
                path.unlink(missing_ok=True)
                faults[i].outcome, faults[i].why = ABSORBED, "the process ended before its next step"
                del self.pending[i]

    def clear(self, faults: list[Fault]) -> None:
        self.follow(faults, set())


def drive(
    strategy: SlurmStrategy,
    trigger: Trigger,
    *,
    window_s: float,
    rep: int,
    seed: int,
    mtbf_s: float | None,
    nodes: Nodes | None = None,
) -> RunRecord:
    """One run: start, first commit, then `window_s` seconds of training with the trigger's faults."""
    job = JobView(strategy.replicas, StepFollower(strategy.run_dir, strategy.replicas))
    courier = Courier(strategy.run_dir, strategy.run_id, nodes)
    starts: dict[int, list[float]] = {i: [] for i in range(strategy.replicas)}
    t_start = time.time()
    strategy.start()
    # The harness's own setup (resetting the lab between runs) is not the strategy's: its clock starts after.
    t_start += getattr(strategy, "setup_s", 0.0)
    t_first: float | None = None
    next_scan = 0.0
    reached = False

    def scan(now: float) -> None:
        found = find_trainers(strategy.run_id)
        for i, pid in found.items():
            if job.pids.get(i) != pid:
                starts[i].append(now)
                job.started_at[i] = now
        job.pids = found
        courier.follow(job.faults, set(found.values()))

    try:
        while True:
            now = time.time()
            strategy.tick(now)
            job.steps.poll()
            if now >= next_scan:
                next_scan = now + PROC_SCAN_S
                scan(now)
            if t_first is None:
                t_first = job.steps.first_commit()
                if t_first is None and now - t_start > STARTUP_S:
                    break
            if t_first is not None:
                if now - t_first >= window_s or trigger.finished(now, job):
                    reached = True
                    break
                f = trigger.due(now, t_first, job)
                if f is not None:
                    scan(now)  # the target as it is now, not as it was at the last scan
                    job.faults.append(courier.deliver(f, job))
                if trigger.release(now, job) is not None and job.faults:
                    # The process the fault struck, if it is still there: never a newer one the strategy started.
                    hit = job.faults[-1]
                    if hit.pid is not None and hit.pid in job.pids.values():
                        release([hit.pid])
                        hit.released_at = time.time()
            time.sleep(TICK_S)
    finally:
        t_end = time.time()
        strategy.stop()
        courier.clear(job.faults)
        release(list(find_trainers(strategy.run_id).values()))
        # Leftovers of this run would slow the next run (on 2 cores a start, importing torch, is half the machine).
        wait_until(lambda: not find_trainers(strategy.run_id), SETTLE_S, f"{strategy.name}'s trainers to exit")
        strategy.settle()
    job.steps.poll()
    attribute_detections(job.faults, strategy.detections)
    for done in job.faults:
        if done.index is not None and done.outcome != ABSORBED:
            done.t_restarted = next((t for t in starts[done.index] if t > done.t_injected), None)
    return RunRecord(
        strategy=strategy.name,
        mtbf_s=mtbf_s,
        rep=rep,
        seed=seed,
        window_s=window_s,
        replicas=strategy.replicas,
        t_start=t_start,
        t_end=t_end,
        reached=reached,
        substrate="slurm",
        faults=job.faults,
        starts=starts,
        steps=job.steps.records,
        extra={"nodes_crashed": courier.crashed, **strategy.extra},
    )


def attribute_detections(faults: list[Fault], detections: list[tuple[float, int | None]]) -> None:
    """Each struck fault's detection: the strategy's first notice after it, about its replica (or the whole job)."""
    for f in faults:
        if f.outcome == ABSORBED:
            continue
        later = [t for t, who in detections if t >= f.t_injected and (who is None or who == f.index)]
        f.t_detected = min(later) if later else None
