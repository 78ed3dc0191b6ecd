"""One cycle of the compute-node daemon: look (trainers, GPUs, links), decide (node_policy), act (executor).

The cycle is the glue; each job is a part of its own: adoption.py (which processes are a job's, verified
against Slurm; stale runs fenced), exits.py (a watched launcher's exit, resolved through Slurm),
hang_watches.py (each job's hang, D-state and memory checks), health_checks.py (the node's own GPUs,
links and GPU count). Trainers found at start-up are adopted as they are: never killed for being
unknown; only a failure observed after adoption leads to an action.

Which processes are a job's is the kernel's and Slurm's word, never the process's (trainers.py,
identity.py). A group is its launcher: only each numbered step's task roots (torchrun's agent, or the
trainer itself) are watched for their exit; hangs, D state, memory and GPU faults cover the whole tree.
A kill takes every process of the job on this node (its agent too), except a hang in a job with in-job
restarts (restart.in_job): then only the hung step is killed and the job's own agent starts its successor.

Each job is judged by its own settings (job_settings.py: its job.json); the node config gives the pace
and the GPU thresholds. A job whose job.json cannot be used gets job_settings.fallback (its hangs
reported, not acted on) and a `report` line in its run directory saying so, once per job and reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lamplighter.configs.schema import NodeConfig
from lamplighter.lighthouse.status import fetch_status
from lamplighter.rundir.actions import RunDirActions
from lamplighter.rundir.contract import lighthouse_address
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.parsers import NodeInfo
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.checks.exit_watcher import ExitWatcher
from lamplighter.supervisor.checks.links import LinkReader
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.job_table import JobTable, table_max_age_s
from lamplighter.supervisor.metrics import DaemonMetrics
from lamplighter.supervisor.neighbour_watch import NeighbourWatch
from lamplighter.supervisor.node.adoption import Adoption, JobsSeen
from lamplighter.supervisor.node.exits import ExitResolver, ExitSource
from lamplighter.supervisor.node.hang_watches import HangWatches
from lamplighter.supervisor.node.health_checks import NodeChecks
from lamplighter.supervisor.node.job_settings import (
    JobSettings,
    JobSettingsCache,
    applied_notice,
    read_job_settings,
    settings_notice,
)
from lamplighter.supervisor.node.job_watch import Fetch
from lamplighter.supervisor.node.lighthouse_reads import LighthouseReads, Place, lighthouse_place, table_place
from lamplighter.supervisor.node.trainers import (
    NodeTrainer,
    TrainerScanner,
    task_roots,
    trainer_step,
)
from lamplighter.supervisor.node_policy import (
    REASON_PREFIX,
    Context,
    GpuEvent,
    LocalJob,
    NodeAction,
    NodeEvent,
    NodePolicyState,
    TrainerEvent,
    decide,
)
from lamplighter.system.procfs import read_uid
from lamplighter.system.users import uid_of

log = logging.getLogger(__name__)

CLUSTER_VIEW_S = 15.0  # how long Slurm's node list serves the drain decisions of a fault that stays


class UserFiles(Protocol):
    """What the loop reads as each job's user, not as root (supervisor/user_reads' UserReads has it)."""

    def address(self, run_dir: Path, owner: int | None) -> tuple[str | None, str | None]: ...
    def fetcher(self, owner: int) -> Fetch: ...
    def keep(self, owners: Iterable[int]) -> None: ...


class GpuObserver(Protocol):
    """What the loop needs of a GPU check (supervisor/gpu/check.py's GpuCheck has it)."""

    def observe(self, now: float) -> list[GpuObservation]: ...
    def close(self) -> None: ...


@dataclass
class ComputeLoop:
    cfg: NodeConfig
    node: str
    api: SlurmApi
    executor: Executor  # built with its run-dir writer over `seen` (compute_executor_parts)
    gpus: GpuObserver | None
    clock: Callable[[], float]
    seen: JobsSeen  # the run dir and owner of each job seen here: shared with the executor's run-dir writer
    metrics: DaemonMetrics | None = None
    proc_root: Path = Path("/proc")
    exit_grace_s: float = 10.0
    slow_every: int = 5  # D-state and memory read all of /proc: every this many cycles
    watcher: ExitSource | None = None  # default: pidfds (ExitWatcher)
    wake: Callable[[], None] | None = None  # called on a trainer's exit (from the watcher's thread): cycle now
    fetch_lighthouse: Fetch | None = None  # tests: read here, in the cycle; default: LighthouseReads (off the cycle)
    links: LinkReader | None = None  # tests: a sys tree of their own; default: node.yaml's network links in /sys
    job_table: JobTable | None = None  # the head's published jobs; default: cluster_status_dir's, when set
    neighbours: NeighbourWatch | None = None  # slurmd watch for the head; default: cluster_status_dir's, when set
    user_files: UserFiles | None = None  # the daemon's: lighthouse.json and /status read as the job's user
    policy: NodePolicyState = field(default_factory=NodePolicyState)
    cycles: int = 0
    last_gpus: list[GpuObservation] = field(default_factory=list)

    def __post_init__(self) -> None:
        folder = self.cfg.cluster_status_dir
        if folder and (self.job_table is None or self.neighbours is None):
            owner = uid_of(self.cfg.cluster_status_owner)
            if self.job_table is None:
                self.job_table = JobTable(Path(folder), table_max_age_s(self.cfg.slurm_poll_s), owner=owner)
            if self.neighbours is None:
                self.neighbours = NeighbourWatch(Path(folder), self.node, owner=owner, clock=self.clock)
        self.scanner = TrainerScanner(self.proc_root, self.node)
        self.adoption = Adoption(self.cfg, self.node, self.api, self.clock, self.seen, self.job_table, self.metrics)
        source = self.watcher if self.watcher is not None else ExitWatcher(self.clock, self.wake)
        self.exits = ExitResolver(self.api, source, self.settings, self.exit_grace_s)
        self.lighthouse_reads = LighthouseReads(
            lambda address, timeout: fetch_status(address, timeout=timeout),
            self._lighthouse_place,
            fetch_as=None if self.user_files is None else self.user_files.fetcher,
        )
        self.hang_watches = HangWatches(
            self.cfg,
            self.settings,
            self.lighthouse_reads,
            self.proc_root,
            self.fetch_lighthouse,
            self.metrics,
            lighthouse_address if self.user_files is None else self.user_files.address,
        )
        self.node_checks = NodeChecks(
            self.cfg,
            self.node,
            self.api,
            self.executor.state.policy_entry,
            self.executor.state.set_policy,
            self.links,
            self._cluster_nodes,
        )
        self._probed_at: float | None = None  # the last GPU probe (idle_probe_interval_s)
        self._settings_said: dict[str, str] = {}  # job id -> the settings error its run directory was told
        self._cluster_view: tuple[float, list[NodeInfo]] | None = None
        # The VM fault history outlives the daemon: a restart must not forgive a node its faults.
        vm_faults = NodePolicyState.vm_faults_from_json(self.executor.state.policy().get(VM_FAULTS_KEY))
        self.policy = NodePolicyState(self.policy.jobs, vm_faults)

    def _probe_due(self, now: float) -> bool:
        """Every cycle while a lamplighter trainer runs here; with none, at the node's idle pace (a probe's CPU
        is another tenant's). The last probe's findings stand between two."""
        if self.trainers or self._probed_at is None:
            return True
        return now - self._probed_at >= self.cfg.health.idle_probe_interval_s

    @property
    def settings(self) -> JobSettingsCache:
        return self.seen.settings

    @property
    def trainers(self) -> dict[tuple[int, int], NodeTrainer]:
        """Every verified process of a lamplighter job here."""
        return self.adoption.trainers

    @property
    def slurm_asked(self) -> int:
        return self.adoption.slurm_asked

    # -- the cycle -----------------------------------------------------------------

    def cycle(self) -> list[dict[str, Any]]:
        if self.neighbours is not None:
            self.neighbours.cycle()
        now = self.clock()
        slow = self.cycles % self.slow_every == 0
        self.adoption.adopt(self.scanner.scan(), slow)
        roots = task_roots(list(self.trainers.values()))
        self.exits.watch(roots, set(self.trainers))
        self.hang_watches.update(list(self.trainers.values()), roots, now)
        if self.user_files is not None:
            self.user_files.keep({t.uid for t in self.trainers.values()})
        events: list[TrainerEvent | GpuEvent | NodeEvent] = []
        self.exits.observe(now)
        events += self.exits.resolve(now, roots)
        events += self.hang_watches.hangs(now, self.exits.exiting())
        if slow:
            events += self.hang_watches.stuck(now)
        events += self.adoption.stale_events(now)
        if self.gpus is not None and self._probe_due(now):
            self.last_gpus = self.gpus.observe(now)
            self._probed_at = now
            events += [gpu_event(g, self.proc_root) for g in self.last_gpus]
        gpus = self.last_gpus if self.gpus is not None else None
        events += self.node_checks.faults(now, gpus)
        ctx = self._context(
            now,
            any(
                isinstance(e, NodeEvent) or (isinstance(e, GpuEvent) and e.status in ("fault", "unresponsive"))
                for e in events
            ),
        )
        before = self.policy.vm_faults
        self.policy, actions = decide(now, self.policy, events, self.cfg, ctx)
        if self.policy.vm_faults != before:
            self.executor.state.set_policy(now, VM_FAULTS_KEY, self.policy.vm_faults_json())
        self.cycles += 1
        keep = {t.job_id for t in self.trainers.values()} | self.exits.jobs() | set(self.policy.jobs)
        self.settings.keep(keep)
        self.adoption.keep(keep)
        self.hang_watches.keep(keep)
        self._settings_said = {j: e for j, e in self._settings_said.items() if j in keep}
        if self.metrics is not None:
            self.metrics.gpus(now, self.last_gpus)
            per_job: dict[str, int] = {}
            for t in self.trainers.values():
                name = t.job_name or "?"
                per_job[name] = per_job.get(name, 0) + 1
            self.metrics.set_trainers(per_job)
            mine = [e for e in events if self.adoption.first_node(getattr(e, "job_id", "")) == self.node]
            self.metrics.trainer_faults(now, mine, {a.target for a in actions if a.kind != "report"})
        actions += self._settings_notices() + self.hang_watches.notices()
        if not any(a.kind == "drain" for a in actions):
            actions += self.node_checks.resume(now, gpus, self._last_drain_here)
        if not actions:
            return []
        self.adoption.killed |= {pid for a in actions if a.kind == "kill_local" for pid in a.pids}
        if any(a.kind in ("drain", "resume") for a in actions):
            self._cluster_view = None  # our own change: the next decision must see it
        return self.executor.execute(now, actions)

    def next_cycle_in(self, interval: float) -> float:
        """Seconds from this cycle's start to the next: the poll interval, or sooner while an exit awaits Slurm."""
        return self.exits.next_cycle_in(interval)

    # -- context ---------------------------------------------------------------------

    def _context(self, now: float, gpu_fault: bool) -> Context:
        jobs: dict[str, LocalJob] = {}
        for t in self.trainers.values():
            j = jobs.get(t.job_id)
            pid = (t.pid, t.start_time)
            pids = (j.pids if j else ()) + (pid,)
            steps = dict(j.steps if j else {})
            steps[t.step] = steps.get(t.step, ()) + (pid,)
            jobs[t.job_id] = LocalJob(t.job_id, t.job_name, t.replica_id, t.attempt, pids, t.renewals, t.uid, steps)
        known = self.settings.known()
        restart = {j: s.restart for j, s in known.items()}
        reported = {j: s.error for j, s in known.items() if s.hangs == "report" and s.error is not None}
        if not gpu_fault:
            return Context(self.node, jobs, restart=restart, hangs_reported=reported)
        # Only when a drain is on the table: the cluster's view (one scontrol call).
        history = self.executor.state.drain_history()
        drained_by_us = False
        total = 0
        try:
            nodes = self._cluster_nodes(now)
            total = len(nodes)
            for n in nodes:
                ours = (n.reason or "").startswith(REASON_PREFIX) and (n.is_drained or n.is_down)
                if ours:
                    history.append((now, n.name))  # counted as recent: erring on the side of draining less
                if n.name == self.node and n.is_drained and ours:
                    drained_by_us = True
        except SlurmError as e:
            log.error("cannot list nodes for the drain limit: %s", e)
        return Context(self.node, jobs, drained_by_us, tuple(history), total, restart, reported)

    def _settings_notices(self) -> list[NodeAction]:
        """A `report` for each job here newly on the fallback settings (or on it for another reason), once its
        run directory is known (a task seen before its exec names neither yet), and one when its own settings
        apply after all: `lamplighter why` and the node's action log say which settings supervise the job."""
        out = []
        known = self.settings.known()
        for job_id, ref in sorted(self.hang_watches.refs.items()):
            s = known.get(job_id)
            if s is None:
                continue
            said = self._settings_said.get(job_id)
            observation = {"type": "settings", "config": s.source, "error": s.error, "hangs": s.hangs}
            if (
                s.error is not None
                and said != s.error
                and self.settings.settled(job_id)
                and self.seen.run_dir_of(job_id)
            ):
                self._settings_said[job_id] = s.error
                out.append(NodeAction("report", job_id, settings_notice(s), observation, group=ref[1], jobs=(ref,)))
            elif s.error is None and said is not None:
                del self._settings_said[job_id]
                out.append(NodeAction("report", job_id, applied_notice(s), observation, group=ref[1], jobs=(ref,)))
        return out

    def _cluster_nodes(self, now: float) -> list[NodeInfo]:
        """Slurm's node list, asked again after CLUSTER_VIEW_S or once this daemon drained or resumed a node.

        A fault that stays (a dead GPU on a drained node, a drain the rate limit refused) is seen every cycle;
        asking slurmctld for every node's state each time would load it for nothing."""
        if self._cluster_view is None or now - self._cluster_view[0] >= CLUSTER_VIEW_S:
            self._cluster_view = (now, self.api.nodes())
        return self._cluster_view[1]

    def _last_drain_here(self) -> float | None:
        """When this daemon last drained this node (its journal), or None."""
        return max((t for t, n in self.executor.state.drain_history() if n == self.node), default=None)

    def _lighthouse_place(self, job: str, uid: int) -> Place:
        """Where the job's Lighthouse runs: from the head's table and ring, else from Slurm."""
        if self.job_table is not None and self.neighbours is not None:
            place = table_place(self.job_table.named, self.neighbours.address_of, self.cfg.job_prefix, job, uid)
            if place is not None:
                return place
        return lighthouse_place(self.api, self.cfg.job_prefix, job, uid)

    def status(self) -> dict[str, Any]:
        by_job: dict[str, list[NodeTrainer]] = {}
        for t in self.trainers.values():
            by_job.setdefault(t.job_id, []).append(t)
        steps = {job: trainer_step(ts) for job, ts in by_job.items()}

        def row(t: NodeTrainer) -> dict[str, Any]:
            return {
                "pid": t.pid,
                "job_id": t.job_id,
                "job": t.job_name,
                "replica_id": t.replica_id,
                "attempt": t.attempt,
                "step": t.step,
                "uid": t.uid,
                "root": self.exits.watched(t.key),
            }

        # Task roots (the watched launchers) first, then their children.
        order = sorted(self.trainers.values(), key=lambda t: (not self.exits.watched(t.key), t.pid))
        return {
            "role": "compute",
            "node": self.node,
            "cycles": self.cycles,
            "trainers": [row(t) for t in order if t.step == steps.get(t.job_id)],
            "spares": [row(t) for t in order if t.step_number is not None and t.step != steps.get(t.job_id)],
            "agents": [row(t) for t in order if t.step_number is None],  # each group's batch step
            "jobs": self.hang_watches.status(),
            "gpus": [{"gpu": g.gpu, "status": g.status, "kind": g.kind, "reason": g.reason} for g in self.last_gpus],
            "policy": self.policy.to_json(),
            "vm_faults": self.policy.vm_faults_json(),
            "silent_neighbours": {} if self.neighbours is None else dict(self.neighbours.silent),
        }

    def close(self) -> None:
        if self.neighbours is not None:
            self.neighbours.close()
        self.exits.close()
        if self.gpus is not None:
            self.gpus.close()


def compute_executor_parts(
    read_settings: Callable[[str | None, int], JobSettings] = read_job_settings,
) -> tuple[JobsSeen, RunDirActions]:
    """What a compute node's executor and loop share, built first: the jobs seen here (with their settings
    cache) and the executor's writer of action lines into each job's run directory, as the job's user."""
    seen = JobsSeen(JobSettingsCache(read_settings))
    return seen, RunDirActions(seen.run_dir_of, seen.uid_of)


VM_FAULTS_KEY = "vm_faults"


def gpu_event(g: GpuObservation, proc_root: Path = Path("/proc")) -> GpuEvent:
    """The policy's view of one GPU observation: every problem found, the pids a VM fault names and their uids."""
    problems = g.values.get("problems", [])
    pids = []
    for ev in g.values.get("events", []):
        if isinstance(ev, dict) and ev.get("event") == "VMFAULT":
            try:
                pids.append(int(str(ev.get("message", "")).partition(":")[0], 16))  # the kernel's "%x:%s"
            except ValueError:
                continue
    return GpuEvent(
        g.gpu,
        g.status,
        g.kind,
        g.reason,
        tuple(str(p) for p in problems) if isinstance(problems, list) else (),
        tuple(p for p in pids if p > 0),
        tuple((p, uid) for p in pids if p > 0 and (uid := read_uid(proc_root, p)) is not None),
    )
