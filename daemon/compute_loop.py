"""One cycle of the compute-node daemon: look (trainers, GPUs), decide (node_policy), act (executor).

Adopted trainers are not our children (slurmstepd started them), so a pidfd
tells us *that* one exited, never *how*. The exit code comes from Slurm: with
`srun --kill-on-bad-exit` a dead task ends the step and the batch script
(which exits with srun's status), so the job ends COMPLETED (exit 0) or FAILED with
ExitCode=<code>:<signal>; `scontrol show job` keeps it for MinJobAge without
accounting. If the job is still running `exit_grace_s` after the exit (a
multi-task step), the exit is treated as a failure with an unknown code.
Trainers found at start-up are adopted as they are: never killed for being
unknown; only a failure observed after adoption leads to an action.

A group is its launcher, not every process carrying its environment: only
each Slurm task's root process (node_trainers.task_roots: torchrun's agent,
or the trainer itself) is watched for its exit. torchrun restarting a worker,
or a data-loader worker ending, is no group failure. Hangs, D state, memory
and GPU faults still cover the whole tree, and a kill takes every process of
the job on this node.

Each job is judged by its own settings (job_settings.py: its job.json):
progress, hang and start-up timeouts, D-state and memory limits per job
(job_watch.py), its restart policy in the policy's context. The node config
gives the pace (poll interval) and the GPU thresholds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lamplighter.configs.schema import NodeConfig
from lamplighter.daemon.executor import Executor
from lamplighter.daemon.fencing import Here, StaleWatch
from lamplighter.daemon.job_settings import JobSettings, JobSettingsCache, read_job_settings
from lamplighter.daemon.job_watch import Fetch, JobWatch, trainer_proc
from lamplighter.daemon.metrics import DaemonMetrics
from lamplighter.daemon.node_policy import (
    REASON_PREFIX,
    Context,
    GpuEvent,
    LocalJob,
    NodePolicyState,
    TrainerEvent,
    decide,
)
from lamplighter.daemon.node_trainers import NodeTrainer, TrainerScanner, expected_job_name, task_roots
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.checks.exit_watcher import ExitWatcher
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.lighthouse_status import LighthouseStatus, fetch_status
from lamplighter.supervisor.observations import Observation, ProcessExited
from lamplighter.supervisor.procfs import ProcStat, snapshot
from lamplighter.supervisor.run_dir_actions import RunDirActions
from lamplighter.supervisor.trainer_proc import TrainerProc

log = logging.getLogger(__name__)

ENDED = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
)


class GpuObserver(Protocol):
    """What the loop needs of a GPU check (supervisor/gpu/check.py's GpuCheck has it)."""

    def observe(self, now: float) -> list[GpuObservation]: ...
    def close(self) -> None: ...


def parse_exit_code(value: str | None) -> int | None:
    """Slurm's ExitCode "<code>:<signal>" as one code: the signal as -N, else the code."""
    if not value or ":" not in value:
        return None
    code, _, sig = value.partition(":")
    try:
        c, s = int(code), int(sig)
    except ValueError:
        return None
    return -s if s else c


class ExitSource(Protocol):
    """What the loop needs of an exit watcher (checks/exit_watcher.py's ExitWatcher has it)."""

    def watch_trainer(self, proc: TrainerProc) -> None: ...
    def observe(self, now: float) -> list[Observation]: ...
    def close(self) -> None: ...


def fetch_lighthouse(address: str, timeout_s: float) -> LighthouseStatus:
    return fetch_status(address, timeout=timeout_s)


def lighthouse_timeout_s(poll_interval_s: float) -> float:
    """A Lighthouse read's bound: well below a poll interval, so a dead one never stalls the cycle."""
    return min(1.0, poll_interval_s / 4)


@dataclass
class ComputeLoop:
    cfg: NodeConfig
    node: str
    api: SlurmApi
    executor: Executor
    gpus: GpuObserver | None
    clock: Callable[[], float]
    metrics: DaemonMetrics | None = None
    proc_root: Path = Path("/proc")
    exit_grace_s: float = 10.0
    slow_every: int = 5  # D-state and memory read all of /proc: every this many cycles
    watcher: ExitSource | None = None  # default: pidfds (ExitWatcher)
    fetch_lighthouse: Fetch = fetch_lighthouse
    read_settings: Callable[[str | None], JobSettings] = read_job_settings
    policy: NodePolicyState = field(default_factory=NodePolicyState)
    trainers: dict[tuple[int, int], NodeTrainer] = field(default_factory=dict)  # every process of every job here
    cycles: int = 0
    last_gpus: list[GpuObservation] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scanner = TrainerScanner(self.proc_root, self.node, self.cfg.slurm_conf)
        self.exits: ExitSource = self.watcher if self.watcher is not None else ExitWatcher(self.clock)
        self.settings = JobSettingsCache(self.read_settings)
        self.watches: dict[str, JobWatch] = {}  # one per lamplighter job (run directory) with tasks here
        self._roots: dict[str, list[NodeTrainer]] = {}  # watch key -> its task roots this cycle
        self._snap: dict[int, ProcStat] = {}  # /proc, read once per slow cycle for every job's checks
        self._verified: dict[str, bool] = {}  # job id -> a lamplighter job in this Slurm
        self._watched: set[tuple[int, int]] = set()  # roots given to the exit watcher
        self._by_pid: dict[int, NodeTrainer] = {}
        self._exits: dict[str, tuple[NodeTrainer, float]] = {}  # job id -> (exited trainer, when)
        self.fencing = StaleWatch()
        if self.executor.job_log is None:
            self.executor.job_log = RunDirActions(self.run_dir_of)
        # The VM fault history outlives the daemon: a restart must not forgive a node its faults.
        vm_faults = NodePolicyState.vm_faults_from_json(self.executor.state.policy().get(VM_FAULTS_KEY))
        self.policy = NodePolicyState(self.policy.jobs, vm_faults)

    # -- the cycle -----------------------------------------------------------------

    def cycle(self) -> list[dict[str, Any]]:
        now = self.clock()
        self._adopt(self.scanner.scan(), now)
        events: list[TrainerEvent | GpuEvent] = []
        for obs in self.exits.observe(now):
            if isinstance(obs, ProcessExited):
                self._on_exit(obs)
        events += self._resolve_exits(now)
        events += self._hangs(now)
        if self.cycles % self.slow_every == 0:
            events += self._slow_checks(now)
        if self.gpus is not None:
            self.last_gpus = self.gpus.observe(now)
            events += [gpu_event(g) for g in self.last_gpus]
        ctx = self._context(now, any(isinstance(e, GpuEvent) and e.status in ("fault", "unresponsive") for e in events))
        before = self.policy.vm_faults
        self.policy, actions = decide(now, self.policy, events, self.cfg, ctx)
        if self.policy.vm_faults != before:
            self.executor.state.set_policy(now, VM_FAULTS_KEY, self.policy.vm_faults_json())
        self.cycles += 1
        self.settings.keep(
            {t.job_id for t in self.trainers.values()}
            | {t.job_id for t in self._by_pid.values()}  # exits not reported yet
            | set(self._exits)
            | set(self.policy.jobs)
        )
        if self.metrics is not None:
            self.metrics.gpus(now, self.last_gpus)
            self.metrics.trainer_faults(now, events, {a.target for a in actions})
        if not actions:
            return []
        return self.executor.execute(now, actions)

    # -- trainers --------------------------------------------------------------------

    def _adopt(self, found: list[NodeTrainer], now: float) -> None:
        current: dict[tuple[int, int], NodeTrainer] = {}
        for t in found:
            if t.key not in self.trainers and not self._is_ours(t):
                continue
            current[t.key] = t
        self.trainers = current
        roots = task_roots(list(current.values()))
        for t in roots:
            if t.key not in self._watched:
                log.info(
                    "watching task root pid %d of Slurm job %s (%s, attempt %d)",
                    t.proc.pid,
                    t.job_id,
                    t.proc.job_name,
                    t.attempt,
                )
                self._watched.add(t.key)
                self._by_pid[t.proc.pid] = t
                self.exits.watch_trainer(trainer_proc(t))
        self._watched &= set(current)
        self._group_by_job(roots, now)

    def _group_by_job(self, roots: list[NodeTrainer], now: float) -> None:
        """Roots by lamplighter job (run directory): each job's watch, made on first sight, kept while it is here."""
        self._roots = {}
        for t in roots:
            s = self.settings.get(t.job_id, t.config, now)
            key = t.run_dir or s.run_dir or f"slurm-job-{t.job_id}"
            first = key not in self._roots
            self._roots.setdefault(key, []).append(t)
            if key not in self.watches:
                self.watches[key] = JobWatch(
                    t.proc.job_name,
                    t.run_dir or s.run_dir,
                    s,
                    self.fetch_lighthouse,
                    lighthouse_timeout_s(self.cfg.health.poll_interval_s),
                    self.proc_root,
                    lambda: self._snap,
                    self.metrics,
                )
            elif first:
                self.watches[key].use(s)  # the job's first task decides (every group of a job has one job.json)
        for key in [k for k in self.watches if k not in self._roots]:
            del self.watches[key]

    def _is_ours(self, t: NodeTrainer) -> bool:
        """Is the trainer's Slurm job a lamplighter group's job, named as render.py names it? Asked once per job."""
        if t.job_id not in self._verified:
            try:
                info = self.api.job(int(t.job_id))
            except (SlurmError, ValueError) as e:
                log.warning("not adopting pid %d: Slurm job %s unknown here (%s)", t.proc.pid, t.job_id, e)
                return False  # asked again next cycle
            want = expected_job_name(self.cfg.job_prefix, t)
            self._verified[t.job_id] = info.name == want
            if info.name != want:
                log.warning("not adopting pid %d: Slurm job %s is %r, not %r", t.proc.pid, t.job_id, info.name, want)
        return self._verified[t.job_id]

    def _on_exit(self, obs: ProcessExited) -> None:
        t = self._by_pid.pop(obs.pid, None)
        if t is not None and t.job_id not in self._exits:
            self._exits[t.job_id] = (t, obs.t)
            # Its settings may have been forgotten when the process left /proc a cycle before its exit was
            # reported: the exit must be judged by the job's own restart policy, never the defaults.
            self.settings.get(t.job_id, t.config, obs.t)

    def _resolve_exits(self, now: float) -> list[TrainerEvent]:
        out = []
        for job_id, (t, when) in list(self._exits.items()):
            try:
                info = self.api.job(int(job_id))
            except SlurmError as e:
                log.warning("exit of pid %d: cannot read Slurm job %s: %s", t.proc.pid, job_id, e)
                continue
            if info.state in ("PENDING", "REQUEUED") or info.restarts > t.attempt:
                del self._exits[job_id]  # requeued already (by us, by Slurm, by a person)
                continue
            if info.state == "CANCELLED":
                # A person's scancel (or `lamplighter cancel`): Slurm would requeue even a cancelled job, and
                # the group would come back against its owner's will (found by the warm-restart bench).
                del self._exits[job_id]
                log.info(
                    "%s group %s: Slurm job %s was cancelled: not restarted", t.proc.job_name, t.proc.replica_id, job_id
                )
                continue
            if info.state in ENDED:
                code = parse_exit_code(info.exit_code)
                why = f"Slurm job {job_id} {info.state} ExitCode={info.exit_code}"
            elif now - when > self.exit_grace_s:
                code, why = None, f"Slurm job {job_id} still {info.state} {now - when:.1f} s after its trainer exited"
            else:
                continue
            del self._exits[job_id]
            reason = f"{t.proc.job_name} group {t.proc.replica_id} trainer pid {t.proc.pid} exited: {why}"
            out.append(
                TrainerEvent(
                    "exit",
                    job_id,
                    t.attempt,
                    reason,
                    code,
                    {"pid": t.proc.pid, "slurm_state": info.state, "exited_at": when},
                    group=f"{t.proc.job_name}/g{t.proc.replica_id}",
                    renewals=t.renewals,
                )
            )
        return out

    def _hangs(self, now: float) -> list[TrainerEvent]:
        out = []
        for key, w in self.watches.items():
            # A job whose launcher exited is being resolved through Slurm: its silence is no news.
            w.set_roots([t for t in self._roots.get(key, []) if t.job_id not in self._exits])
            out += w.hangs(now)
        return out

    def _slow_checks(self, now: float) -> list[TrainerEvent]:
        self._snap = snapshot(self.proc_root)
        out = []
        for w in self.watches.values():
            out += w.stuck(now)
        return out + self._stale(now)

    def _stale(self, now: float) -> list[TrainerEvent]:
        """Trainers of an attempt Slurm has moved on from (fencing.py): one scontrol call per job here."""
        here: dict[str, Here] = {}
        for t in self.trainers.values():
            if t.job_id not in self._exits:
                here[t.job_id] = Here(t.job_id, t.attempt, f"{t.proc.job_name}/g{t.proc.replica_id}")
        infos = {}
        for job_id in here:
            try:
                infos[job_id] = self.api.job(int(job_id))
            except (SlurmError, ValueError) as e:
                log.warning("fencing: cannot read Slurm job %s: %s", job_id, e)
        return [
            TrainerEvent("stale", h.job_id, h.attempt, why, group=h.group)
            for h, why in self.fencing.judge(now, self.node, list(here.values()), infos)
        ]

    # -- context ---------------------------------------------------------------------

    def _context(self, now: float, gpu_fault: bool) -> Context:
        jobs: dict[str, LocalJob] = {}
        for t in self.trainers.values():
            j = jobs.get(t.job_id)
            pids = (j.pids if j else ()) + ((t.proc.pid, t.proc.start_time),)
            jobs[t.job_id] = LocalJob(t.job_id, t.proc.job_name, t.proc.replica_id, t.attempt, pids, t.renewals)
        restart = {j: s.restart for j, s in self.settings.known().items()}
        if not gpu_fault:
            return Context(self.node, jobs, restart=restart)
        # Only when a drain is on the table: the cluster's view (one scontrol call).
        history = list(drain_history(self.executor.state.events()))
        drained_by_us = False
        total = 0
        try:
            nodes = self.api.nodes()
            total = len(nodes)
            for n in nodes:
                ours = (n.reason or "").startswith(REASON_PREFIX) and (n.is_drained or n.is_down)
                if ours:
                    history.append((now, n.name))  # counted as recent: erring on the side of draining less
                if n.name == self.node and n.is_drained and ours:
                    drained_by_us = True
        except SlurmError as e:
            log.error("cannot list nodes for the drain limit: %s", e)
        return Context(self.node, jobs, drained_by_us, tuple(history), total, restart)

    def run_dir_of(self, job_id: str) -> str | None:
        """The run directory of a Slurm job seen on this node (its trainers' environment, else its job.json)."""
        for t in self.trainers.values():
            if t.job_id == job_id and t.run_dir:
                return t.run_dir
        s = self.settings.known().get(job_id)
        return s.run_dir if s is not None else None

    def status(self) -> dict[str, Any]:
        return {
            "role": "compute",
            "node": self.node,
            "cycles": self.cycles,
            "trainers": [
                {
                    "pid": t.proc.pid,
                    "job_id": t.job_id,
                    "job": t.proc.job_name,
                    "replica_id": t.proc.replica_id,
                    "attempt": t.attempt,
                    "root": t.key in self._watched,
                }
                # Task roots (the watched launchers) first, then their children.
                for t in sorted(self.trainers.values(), key=lambda t: (t.key not in self._watched, t.proc.pid))
            ],
            "jobs": [w.status() for w in self.watches.values()],
            "gpus": [{"gpu": g.gpu, "status": g.status, "kind": g.kind, "reason": g.reason} for g in self.last_gpus],
            "policy": self.policy.to_json(),
            "vm_faults": self.policy.vm_faults_json(),
        }

    def close(self) -> None:
        self.exits.close()
        if self.gpus is not None:
            self.gpus.close()


VM_FAULTS_KEY = "vm_faults"


def gpu_event(g: GpuObservation) -> GpuEvent:
    """The policy's view of one GPU observation: every problem found, and the pids a VM fault names."""
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
    )


def drain_history(events: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """(time, node) of drains and mark-downs this daemon carried out, from its journaled events."""
    intents = {e["action"]["id"]: e["action"] for e in events if e.get("type") == "intent"}
    out = []
    for e in events:
        if e.get("type") == "done" and e.get("outcome") in ("ok", "confirmed"):
            a = intents.get(e.get("id", ""))
            if a is not None and a["kind"] in ("drain", "mark_down"):
                out.append((float(a["time"]), str(a["target"])))
    return out
