"""A watched trainer's exit, resolved through Slurm into a failure, a restart inside the job, or nothing.

Adopted trainers are not our children (slurmstepd started them), so a pidfd tells us *that* one exited,
never *how*. The exit code comes from Slurm: with `srun --kill-on-bad-exit` a dead task ends the step and
the batch script, so the job ends COMPLETED or FAILED with ExitCode=<code>:<signal>. If the job is still
running `exit_grace_s` after the exit (a multi-task step), the exit is a failure with an unknown code. A
step ending while another numbered step of its job runs here is the job's own agent restarting it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from lamplighter.policy.observations import Observation, ProcessExited
from lamplighter.slurm.actions import ENDED_STATES, SlurmApi
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.node.job_settings import JobSettingsCache
from lamplighter.supervisor.node.job_watch import trainer_proc
from lamplighter.supervisor.node.trainers import NodeTrainer
from lamplighter.supervisor.node_policy import TrainerEvent
from lamplighter.system.trainer_proc import TrainerProc

log = logging.getLogger(__name__)

# While a trainer's exit awaits Slurm's word that its job ended (its exit code decides a restart), the next
# cycles come this soon: the job's end reaches slurmctld a fraction of a second after its trainer's, and a
# whole poll interval more would be most of a kill's time to act. One `scontrol show job` each; then the pace.
EXIT_RECHECK_S = (0.1, 0.2, 0.4)


class ExitSource(Protocol):
    """What the resolver needs of an exit watcher (checks/exit_watcher.py's ExitWatcher has it)."""

    def watch_trainer(self, proc: TrainerProc) -> None: ...
    def observe(self, now: float) -> list[Observation]: ...
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


@dataclass
class ExitResolver:
    """The task roots given to the exit watcher, and the exits waiting for Slurm to say how their job ended."""

    api: SlurmApi
    source: ExitSource
    settings: JobSettingsCache
    exit_grace_s: float = 10.0

    def __post_init__(self) -> None:
        self._watched: set[tuple[int, int]] = set()  # roots given to the exit watcher
        self._by_pid: dict[int, NodeTrainer] = {}
        self._exits: dict[str, tuple[NodeTrainer, float]] = {}  # job id -> (exited task root, when)
        self._checks = 0  # cycles in a row that asked Slurm about an exit it had not yet seen end

    def watch(self, roots: list[NodeTrainer], adopted: set[tuple[int, int]]) -> None:
        """Give each new task root to the exit watcher; forget the ones no longer adopted."""
        for t in roots:
            if t.key not in self._watched:
                log.info(
                    "watching task root pid %d of Slurm job %s step %s (%s, uid %d, restart %d)",
                    t.pid,
                    t.job_id,
                    t.step,
                    t.job_name,
                    t.uid,
                    t.attempt,
                )
                self._watched.add(t.key)
                self._by_pid[t.pid] = t
                self.source.watch_trainer(trainer_proc(t))
        self._watched &= adopted

    def watched(self, key: tuple[int, int]) -> bool:
        return key in self._watched

    def observe(self, now: float) -> None:
        """Take the exits the watcher saw since the last cycle."""
        for obs in self.source.observe(now):
            if not isinstance(obs, ProcessExited):
                continue
            t = self._by_pid.pop(obs.pid, None)
            if t is not None and t.job_id not in self._exits:
                self._exits[t.job_id] = (t, obs.t)
                # Its settings may have been forgotten when the process left /proc a cycle before its exit was
                # reported: the exit must be judged by the job's own restart policy, never the defaults.
                self.settings.get(t.job_id, t.uid, t.config, obs.t)

    def exiting(self) -> set[str]:
        """Jobs whose launcher exited and whose end Slurm has not said yet."""
        return set(self._exits)

    def jobs(self) -> set[str]:
        """Every job this resolver still holds something of (exits not reported yet, or awaiting Slurm)."""
        return {t.job_id for t in self._by_pid.values()} | set(self._exits)

    def next_cycle_in(self, interval: float) -> float:
        """Seconds from this cycle's start to the next: the poll interval, or sooner while an exit awaits Slurm."""
        if not self._exits or not 0 < self._checks <= len(EXIT_RECHECK_S):
            return interval
        return min(interval, EXIT_RECHECK_S[self._checks - 1])

    def resolve(self, now: float, all_roots: list[NodeTrainer]) -> list[TrainerEvent]:
        """Each exit Slurm has an answer for: a trainer event, or nothing (restarted in the job, requeued,
        cancelled); all_roots: every numbered step's task roots here this cycle (spares too)."""
        self._checks = self._checks + 1 if self._exits else 0
        out = []
        for job_id, (t, when) in list(self._exits.items()):
            try:
                info = self.api.job(int(job_id))
            except SlurmError as e:
                log.warning("exit of pid %d: cannot read Slurm job %s: %s", t.pid, job_id, e)
                continue
            if info.state in ("PENDING", "REQUEUED") or info.restarts > t.attempt:
                del self._exits[job_id]  # requeued already (by us, by Slurm, by a person)
                continue
            if info.state == "RUNNING" and (others := _other_steps(t, all_roots)):
                # The job's own agent started the trainer's successor (the spare, or a cold step) in the
                # allocation; or a spare ended beside a live trainer.
                del self._exits[job_id]
                log.info(
                    "%s group %s: step %s ended (pid %d) while step(s) %s of Slurm job %s run here: "
                    "restarted in the job, nothing to do",
                    t.job_name,
                    t.replica_id,
                    t.step,
                    t.pid,
                    ",".join(others),
                    job_id,
                )
                continue
            if info.state == "CANCELLED":
                # A person's scancel (or `lamplighter cancel`): Slurm would requeue even a cancelled job, and
                # the group would come back against its owner's will (found by the warm-restart bench).
                del self._exits[job_id]
                log.info("%s group %s: Slurm job %s was cancelled: not restarted", t.job_name, t.replica_id, job_id)
                continue
            if info.state in ENDED_STATES:
                code = parse_exit_code(info.exit_code)
                why = f"Slurm job {job_id} {info.state} ExitCode={info.exit_code}"
            elif now - when > self.exit_grace_s:
                code, why = None, f"Slurm job {job_id} still {info.state} {now - when:.1f} s after its trainer exited"
            else:
                continue
            del self._exits[job_id]
            reason = f"{t.job_name} group {t.replica_id} trainer pid {t.pid} exited: {why}"
            out.append(
                TrainerEvent(
                    "exit",
                    job_id,
                    t.attempt,
                    reason,
                    code,
                    {"pid": t.pid, "slurm_state": info.state, "exited_at": when},
                    group=f"{t.job_name}/g{t.replica_id}",
                    renewals=t.renewals,
                )
            )
        return out

    def close(self) -> None:
        self.source.close()


def _other_steps(t: NodeTrainer, roots: list[NodeTrainer]) -> list[str]:
    """Numbered steps of t's job, other than t's, with task roots here now."""
    return sorted({r.step for r in roots if r.job_id == t.job_id and r.step != t.step}, key=int)
