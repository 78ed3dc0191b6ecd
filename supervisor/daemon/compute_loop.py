"""One cycle of the compute-node daemon: look (trainers, GPUs), decide (node_policy), act (executor).

Adopted trainers are not our children (slurmstepd started them), so a pidfd
tells us *that* one exited, never *how*. The exit code comes from Slurm: with
`srun --kill-on-bad-exit` a dead task ends the step and the batch script
(`exec srun`), so the job ends COMPLETED (exit 0) or FAILED with
ExitCode=<code>:<signal>; `scontrol show job` keeps it for MinJobAge without
accounting. If the job is still running `exit_grace_s` after the exit (a
multi-task step), the exit is treated as a failure with an unknown code.
Trainers found at start-up are adopted as they are: never killed for being
unknown; only a failure observed after adoption leads to an action.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from lamplighter.configs.schema import NodeConfig
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.checks.dstate import DStateCheck
from lamplighter.supervisor.checks.exit_watcher import ExitWatcher
from lamplighter.supervisor.checks.hang import HangCheck, HeartbeatFiles
from lamplighter.supervisor.checks.memory import MemoryCheck
from lamplighter.supervisor.daemon.executor import Executor
from lamplighter.supervisor.daemon.metrics import DaemonMetrics
from lamplighter.supervisor.daemon.node_policy import (
    REASON_PREFIX,
    Context,
    GpuEvent,
    LocalJob,
    NodePolicyState,
    TrainerEvent,
    decide,
)
from lamplighter.supervisor.daemon.node_trainers import NodeTrainer, TrainerScanner, expected_job_name
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.observations import DState, MemoryHigh, ProcessExited
from lamplighter.supervisor.trainer_proc import StaticTable, TrainerProc

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


class _Table(StaticTable):
    def set(self, procs: list[TrainerProc]) -> None:
        self._procs = list(procs)


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
    policy: NodePolicyState = field(default_factory=NodePolicyState)
    trainers: dict[tuple[int, int], NodeTrainer] = field(default_factory=dict)
    cycles: int = 0
    last_gpus: list[GpuObservation] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scanner = TrainerScanner(self.proc_root, self.node, self.cfg.slurm_conf)
        self.watcher = ExitWatcher(self.clock)
        self.table = _Table([])
        self.dstate = DStateCheck(self.table, self.cfg.health.d_state_max_s, self.proc_root)
        self.memory = MemoryCheck(self.table, self.cfg.health.memory_max_percent, self.proc_root)
        self._verified: dict[str, bool] = {}  # job id -> a lamplighter job in this Slurm
        self._by_pid: dict[int, NodeTrainer] = {}
        self._exits: dict[str, tuple[NodeTrainer, float]] = {}  # job id -> (exited trainer, when)

    # -- the cycle -----------------------------------------------------------------

    def cycle(self) -> list[dict[str, Any]]:
        now = self.clock()
        self._adopt(self.scanner.scan())
        events: list[TrainerEvent | GpuEvent] = []
        for obs in self.watcher.observe(now):
            if isinstance(obs, ProcessExited):
                self._on_exit(obs)
        events += self._resolve_exits(now)
        events += self._hangs(now)
        if self.cycles % self.slow_every == 0:
            events += self._slow_checks(now)
        if self.gpus is not None:
            self.last_gpus = self.gpus.observe(now)
            for g in self.last_gpus:
                if self.metrics is not None:
                    self.metrics.set_gpu_health(str(g.gpu), g.status)
                events.append(GpuEvent(g.gpu, g.status, g.kind, g.reason))
        ctx = self._context(now, any(isinstance(e, GpuEvent) and e.status in ("fault", "unresponsive") for e in events))
        self.policy, actions = decide(now, self.policy, events, self.cfg, ctx)
        self.cycles += 1
        if not actions:
            return []
        for e in events:
            if isinstance(e, TrainerEvent) and self.metrics is not None:
                self.metrics.fault(e.kind)
        return self.executor.execute(now, actions)

    # -- trainers --------------------------------------------------------------------

    def _adopt(self, found: list[NodeTrainer]) -> None:
        current: dict[tuple[int, int], NodeTrainer] = {}
        for t in found:
            if t.key not in self.trainers and not self._is_ours(t):
                continue
            current[t.key] = t
            if t.key not in self.trainers:
                log.info(
                    "watching trainer pid %d of Slurm job %s (%s, attempt %d)",
                    t.proc.pid,
                    t.job_id,
                    t.proc.job_name,
                    t.attempt,
                )
                self._by_pid[t.proc.pid] = t
                self.watcher.watch_trainer(self._proc(t))
        self.trainers = current
        self.table.set([self._proc(t) for t in current.values()])

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

    @staticmethod
    def _proc(t: NodeTrainer) -> TrainerProc:
        return TrainerProc(
            group=t.proc.replica_id or 0, rank=t.rank, attempt=t.attempt, pid=t.proc.pid, started_at=t.started_at
        )

    def _on_exit(self, obs: ProcessExited) -> None:
        t = self._by_pid.pop(obs.pid, None)
        if t is not None and t.job_id not in self._exits:
            self._exits[t.job_id] = (t, obs.t)

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
                )
            )
        return out

    def _hangs(self, now: float) -> list[TrainerEvent]:
        by_dir: dict[str, list[NodeTrainer]] = {}
        for t in self.trainers.values():
            if t.run_dir and t.job_id not in self._exits:
                by_dir.setdefault(t.run_dir, []).append(t)
        out = []
        h = self.cfg.health
        for run_dir, ts in by_dir.items():
            # The trainer writes its own view of its PID into the heartbeat: match on that.
            procs = [replace(self._proc(t), pid=t.ns_pid) for t in ts]
            check = HangCheck(
                StaticTable(procs), HeartbeatFiles(Path(run_dir)), h.hang_timeout_s, startup_grace_s=h.hang_timeout_s
            )
            pid_job = {t.ns_pid: t for t in ts}
            for hung in check.observe(now):
                t = pid_job[hung.pid]
                out.append(
                    TrainerEvent(
                        "hang",
                        t.job_id,
                        t.attempt,
                        f"{t.proc.job_name} {hung.reason}",
                        detail={"pid": t.proc.pid, "silent_s": round(hung.silent_s, 3)},
                    )
                )
        return out

    def _slow_checks(self, now: float) -> list[TrainerEvent]:
        pid_job = {t.proc.pid: t for t in self.trainers.values()}
        by_group = {(t.proc.replica_id or 0, t.attempt): t for t in self.trainers.values()}
        found: list[DState | MemoryHigh] = [*self.dstate.observe(now), *self.memory.observe(now)]
        out = []
        for obs in found:
            # D state may be reported for a child of the trainer: find the trainer by its group.
            t = pid_job.get(obs.pid) or by_group.get((obs.group, obs.attempt))
            if t is None:
                continue
            kind: Literal["dstate", "memory"] = "dstate" if isinstance(obs, DState) else "memory"
            out.append(
                TrainerEvent(kind, t.job_id, t.attempt, f"{t.proc.job_name} {obs.reason}", detail={"pid": obs.pid})
            )
        return out

    # -- context ---------------------------------------------------------------------

    def _context(self, now: float, gpu_fault: bool) -> Context:
        jobs: dict[str, LocalJob] = {}
        for t in self.trainers.values():
            j = jobs.get(t.job_id)
            pids = (j.pids if j else ()) + ((t.proc.pid, t.proc.start_time),)
            jobs[t.job_id] = LocalJob(t.job_id, t.proc.job_name, t.proc.replica_id, t.attempt, pids)
        if not gpu_fault:
            return Context(self.node, jobs)
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
        return Context(self.node, jobs, drained_by_us, tuple(history), total)

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
                }
                for t in self.trainers.values()
            ],
            "gpus": [{"gpu": g.gpu, "status": g.status, "kind": g.kind, "reason": g.reason} for g in self.last_gpus],
            "policy": self.policy.to_json(),
        }

    def close(self) -> None:
        self.watcher.close()
        if self.gpus is not None:
            self.gpus.close()


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
