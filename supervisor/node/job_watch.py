"""The checks of one lamplighter job's groups on this node, with the job's own thresholds.

One watch per job (its run directory) while it has tasks here, kept across
cycles: its `LighthouseProgress` remembers when each replica's step last
changed, so a new one every cycle could never see a group stop. Progress
comes from the sources the job's `health.progress` names (the job's own
Lighthouse, heartbeat files), judged by the group-level HangCheck with the
job's `hang_timeout_s` and `startup_timeout_s`; a torchft trainer that writes
no heartbeat file but commits steps is seen advancing through the Lighthouse.

The Lighthouse's address is looked up at every read: `<run_dir>/lighthouse.json`
(whoever runs it publishes it there, and it moves when its Slurm job is
requeued), else the address the job's config fixes. Each read is bounded by
`fetch_timeout_s`, well below the poll interval, so a dead Lighthouse cannot
stall the daemon; while it cannot be read its silence is excused (HangCheck),
and that is logged when it starts and when it ends, not every cycle.

The checks watch each task's root process (trainers.task_roots); D state
and memory cover its whole process tree.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lamplighter.lighthouse.progress import LighthouseProgress
from lamplighter.lighthouse.status import LighthouseStatus, LighthouseStatusError
from lamplighter.policy.observations import DState, MemoryHigh
from lamplighter.rundir.contract import lighthouse_address
from lamplighter.rundir.heartbeats import ProgressSource
from lamplighter.rundir.stop_at import final_target, read_stop_at
from lamplighter.supervisor.checks.dstate import DStateCheck
from lamplighter.supervisor.checks.hang import HangCheck, progress_sources
from lamplighter.supervisor.checks.memory import MemoryCheck
from lamplighter.supervisor.checks.progress_pace import ProgressPace, pace_rule
from lamplighter.supervisor.metrics import DaemonMetrics
from lamplighter.supervisor.node.job_settings import JobSettings
from lamplighter.supervisor.node.trainers import NodeTrainer
from lamplighter.supervisor.node_policy import TrainerEvent
from lamplighter.system.procfs import ProcStat
from lamplighter.system.trainer_proc import TrainerProc

log = logging.getLogger(__name__)

Fetch = Callable[[str, float], LighthouseStatus]  # (address, timeout) -> the Lighthouse's /status
# (run dir, owner) -> (address, None) or (None, why not): its lighthouse.json (rundir.contract.lighthouse_address)
AddressReader = Callable[[Path, int | None], tuple[str | None, str | None]]


def trainer_proc(t: NodeTrainer) -> TrainerProc:
    """The checks' view of a trainer: its attempt as the trainer counts it (what its heartbeats name)."""
    return TrainerProc(
        group=t.replica_id or 0, rank=t.rank, attempt=t.trainer_attempt, pid=t.pid, started_at=t.started_at
    )


class _Roots:
    """The ProcessTable the checks read: this job's task roots on this node, set every cycle."""

    def __init__(self) -> None:
        self.roots: list[NodeTrainer] = []

    def trainers(self) -> list[TrainerProc]:
        return [trainer_proc(t) for t in self.roots]


@dataclass
class _Said:
    """What was last logged about the job's progress sources (each change is logged once)."""

    address: str | None = None
    lighthouse_error: str | None = None
    warning: str | None = None
    published: str | None = None  # why lighthouse.json was ignored
    unreadable: bool = False  # its Lighthouse answers a page the parser does not know


class JobWatch:
    def __init__(
        self,
        name: str,
        run_dir: str | None,
        settings: JobSettings,
        fetch: Fetch,
        fetch_timeout_s: float,
        proc_root: Path,
        read_snapshot: Callable[[], dict[int, ProcStat]],
        metrics: DaemonMetrics | None = None,
        owner: int | None = None,
        read_address: AddressReader = lighthouse_address,
    ) -> None:
        self.name = name
        self._read_address = read_address
        self.owner = owner  # the job's user: the only one whose files in its run directory count
        self._metrics = metrics
        self._quorum_id: int | None = None
        self.run_dir = run_dir
        self.settings = settings
        self._fetch = fetch
        self._fetch_timeout = fetch_timeout_s
        self._table = _Roots()
        self._pace = ProgressPace()
        self.address: str | None = None
        self.lighthouse = LighthouseProgress(self._read_lighthouse)
        self._proc_root, self._read_snapshot = proc_root, read_snapshot
        self._tree_checks()
        self._said = _Said()
        self.notices: list[str] = []  # lines for the job's run directory, taken by the compute loop
        if metrics is not None:
            metrics.job_settings(name, settings.fallback)

    def _tree_checks(self) -> None:
        h = self.settings.health
        self.dstate = DStateCheck(self._table, h.d_state_max_s, self._proc_root, self._read_snapshot)
        self.memory = MemoryCheck(self._table, h.memory_max_percent, self._proc_root, read_snapshot=self._read_snapshot)

    def use(self, settings: JobSettings) -> None:
        """Other settings (its config could be read at last): the progress seen so far is kept."""
        if settings == self.settings:
            return
        log.info("job %s: now applying the settings of %s", self.name, settings.source)
        self.settings = settings
        self._tree_checks()
        if self._metrics is not None:
            self._metrics.job_settings(self.name, settings.fallback)

    def set_roots(self, roots: list[NodeTrainer]) -> None:
        self._table.roots = list(roots)

    # -- progress ----------------------------------------------------------------------

    def _read_lighthouse(self) -> LighthouseStatus:
        if self.address is None:
            raise LighthouseStatusError("its address is unknown")
        return self._fetch(self.address, self._fetch_timeout)

    def lighthouse_address(self) -> str | None:
        published, why = self._read_address(Path(self.run_dir), self.owner) if self.run_dir else (None, None)
        if why != self._said.published:
            if why:
                log.warning("job %s: ignoring its published Lighthouse address: %s", self.name, why)
            self._said.published = why
        return published or self.settings.lighthouse

    def _sources(self) -> list[ProgressSource]:
        mode = self.settings.health.progress
        lighthouse = self.lighthouse if self.address is not None else None
        if self.run_dir is not None:
            sources, warning = progress_sources(mode, Path(self.run_dir), lighthouse, self.owner)
        else:
            sources = [lighthouse] if lighthouse is not None and mode in ("auto", "lighthouse") else []
            warning = None if sources or mode == "off" else "no run directory and no Lighthouse address: no hang check"
        if warning != self._said.warning:
            if warning:
                log.warning("job %s: %s", self.name, warning)
            self._said.warning = warning
        return sources

    def hangs(self, now: float) -> list[TrainerEvent]:
        wants_lighthouse = self.settings.health.progress in ("auto", "lighthouse")
        self.address = self.lighthouse_address() if wants_lighthouse else None
        if self.address is not None and self.address != self._said.address:
            log.info("job %s: reading progress from its Lighthouse at %s", self.name, self.address)
            self._said.address = self.address
        h = self.settings.health
        check = HangCheck(
            self._table,
            self._sources(),
            h.hang_timeout_s,
            h.startup_timeout_s,
            target_step=self._target_step(),
            pace_rule=pace_rule(h),
            pace=self._pace,  # what this job's pace taught, kept across cycles
        )
        found = check.observe(now)
        self._log_lighthouse()
        by_group = {(t.replica_id or 0, t.trainer_attempt): t for t in reversed(self._table.roots)}
        out = []
        for hung in found:
            t = by_group.get((hung.group, hung.attempt))
            if t is None:
                continue
            out.append(
                TrainerEvent(
                    "hang",
                    t.job_id,
                    t.attempt,
                    f"{t.job_name} {hung.reason}",
                    detail={"pid": t.pid, "silent_s": round(hung.silent_s, 3), "source": hung.source},
                    group=f"{t.job_name}/g{t.replica_id}",
                    renewals=t.renewals,
                    step=t.step,
                )
            )
        return out

    def _target_step(self) -> int | None:
        """trainer.steps, or the step the owner told the running job to stop at (its run dir's stop-at)."""
        target = self.settings.target_step
        if target is None or self.run_dir is None:
            return target
        return final_target(target, read_stop_at(Path(self.run_dir), self.owner))

    def _log_lighthouse(self) -> None:
        err = self.lighthouse.error if self.address is not None else None
        last = self.lighthouse.last
        if err is None and last is not None and self._metrics is not None:
            if self._quorum_id is not None and last.quorum_id != self._quorum_id:
                self._metrics.quorum_changes.inc()
            self._quorum_id = last.quorum_id
        self._say_unreadable(err)
        if err == self._said.lighthouse_error:
            return
        if err is not None and self._metrics is not None and self._said.lighthouse_error is None:
            self._metrics.lighthouse_unreachable.inc()
        if err is not None and self._said.lighthouse_error is None:
            log.warning(
                "job %s: cannot read its Lighthouse at %s (%s): silence is excused until it can be read again",
                self.name,
                self.address,
                err,
            )
        elif err is None:
            log.info("job %s: its Lighthouse at %s can be read again", self.name, self.address)
        self._said.lighthouse_error = err

    def _say_unreadable(self, err: str | None) -> None:
        """A Lighthouse that answers a page this parser does not know (its torchft is not the one lamplighter
        reads) is no outage that passes: its silence is excused for good, so the hang check is off. Said in the
        job's run directory when it starts and when it ends, and the metric lamplighter_lighthouse_unreadable."""
        unreadable = err is not None and self.lighthouse.unreadable
        if unreadable == self._said.unreadable:
            return
        self._said.unreadable = unreadable
        if self._metrics is not None:
            self._metrics.lighthouse_unreadable(self.name, unreadable)
        if unreadable:
            log.error("job %s: its Lighthouse's status page cannot be read: no hang check from it: %s", self.name, err)
            self.notices.append(
                f"Lighthouse status unreadable: hang check off for this job (unless its trainers write heartbeat "
                f"files): {err}. The Lighthouse's torchft must serve the /status page this lamplighter reads "
                "(lamplighter --version names the torchft it was tested with)"
            )
        else:
            log.info("job %s: its Lighthouse's status page can be read again", self.name)
            self.notices.append("Lighthouse status readable again: hang check on for this job")

    def take_notices(self) -> list[str]:
        out, self.notices = self.notices, []
        return out

    # -- process trees ---------------------------------------------------------------

    def stuck(self, now: float) -> list[TrainerEvent]:
        """D state and memory over each task's whole tree (the /proc snapshot is shared with other jobs)."""
        by_task = {(t.replica_id or 0, t.rank, t.trainer_attempt): t for t in self._table.roots}
        found: list[DState | MemoryHigh] = [*self.dstate.observe(now), *self.memory.observe(now)]
        out = []
        for obs in found:
            t = by_task.get((obs.group, obs.rank, obs.attempt))
            if t is None:
                continue
            kind: Literal["dstate", "memory"] = "dstate" if isinstance(obs, DState) else "memory"
            out.append(
                TrainerEvent(
                    kind,
                    t.job_id,
                    t.attempt,
                    f"{t.job_name} {obs.reason}",
                    detail={"pid": obs.pid},
                    group=f"{t.job_name}/g{t.replica_id}",
                    renewals=t.renewals,
                )
            )
        return out

    def status(self) -> dict[str, Any]:
        s = self.settings
        return {
            "job": self.name,
            "run_dir": self.run_dir,
            "config": s.source,
            "config_error": s.error,
            "hangs": s.hangs,  # "report": the fallback (job_settings.py), its hangs said and not acted on
            "progress": s.health.progress,
            "hang_timeout_s": s.health.hang_timeout_s,
            "startup_timeout_s": s.health.startup_timeout_s,
            "lighthouse": self.address,
            "lighthouse_error": self.lighthouse.error if self.address is not None else None,
            "lighthouse_unreadable": self._said.unreadable,  # its page not understood: no hang check from it
            "lighthouse_steps": self.lighthouse.steps(),
        }
