"""One job's hang check on a bare-metal host: its trainers here, judged by the job's own thresholds.

The same check as local mode and the Slurm node daemon (supervisor/checks/hang.py):
progress from the sources the job's `health.progress` names (heartbeat files in
its run directory, its Lighthouse), kept across cycles so a group that stops is
seen stopping. A Lighthouse that cannot be read excuses the silence.

A host restarts a group in place under the same epoch, which is the trainers'
attempt number: progress from before the attempt's processes started (the
killed trainer's last heartbeat, still in its file) is not theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lamplighter.configs.schema import JobConfig
from lamplighter.lighthouse.progress import LighthouseProgress
from lamplighter.lighthouse.status import LighthouseStatus, fetch_status
from lamplighter.policy.observations import Hung
from lamplighter.rundir.heartbeats import Progress, ProgressSource
from lamplighter.rundir.stop_at import final_target, read_stop_at
from lamplighter.supervisor.checks.hang import HangCheck, progress_sources
from lamplighter.supervisor.checks.progress_pace import pace_rule
from lamplighter.system.trainer_proc import TrainerProc

FETCH_TIMEOUT_S = 0.5  # a dead Lighthouse must not stall the host's cycle


def lighthouse_address(job: JobConfig) -> str:
    """Where the job's trainers and this check reach its Lighthouse (lighthouse.host, an IPv6 one bracketed)."""
    host = job.lighthouse.local_host
    return f"http://[{host}]:{job.lighthouse.port}" if ":" in host else f"http://{host}:{job.lighthouse.port}"


class SinceStart:
    """A progress source that counts nothing from before the processes it judges started.

    Found in `make demo-bare`: a hung trainer killed and started again under the same epoch was killed
    again 0.5 s later, "no progress for 6.9 s, last step 76": until the new process wrote its first
    heartbeat, the old one's (same attempt) was taken for its progress, and its silence counted from it."""

    def __init__(self, source: ProgressSource) -> None:
        self._source = source
        self.name = source.name

    def refresh(self, now: float) -> None:
        self._source.refresh(now)

    def excused_until(self, now: float) -> float:
        return self._source.excused_until(now)

    def job_progress(self) -> tuple[set[int], float | None]:
        return self._source.job_progress()  # the peers' progress, whenever they started

    def last_progress(self, group: int, attempt: int, started_at: float) -> Progress | None:
        p = self._source.last_progress(group, attempt, started_at)
        return p if p is not None and p.t >= started_at else None


class _Table:
    def __init__(self) -> None:
        self.procs: list[TrainerProc] = []

    def trainers(self) -> list[TrainerProc]:
        return self.procs


class JobHangWatch:
    def __init__(self, job: JobConfig, owner: int | None = None) -> None:
        """`owner`: the uid the job's trainers run as here (its account): only that user's heartbeat and stop-at
        files count (default: this process's user)."""
        self._owner = owner
        address = lighthouse_address(job)

        def fetch() -> LighthouseStatus:
            return fetch_status(address, FETCH_TIMEOUT_S)

        run_dir = self._run_dir = Path(job.run_dir or f"runs/{job.name}")
        self._steps = job.trainer.steps
        sources, _ = progress_sources(job.health.progress, run_dir, LighthouseProgress(fetch), owner)
        sources = [SinceStart(x) for x in sources]
        self._table = _Table()
        self._check = HangCheck(
            self._table,
            sources,
            job.health.hang_timeout_s,
            job.health.startup_timeout_s,
            target_step=job.trainer.steps,
            pace_rule=pace_rule(job.health),
        )

    def observe(self, now: float, procs: Sequence[TrainerProc]) -> list[Hung]:
        self._table.procs = list(procs)
        self._check.target_step = final_target(self._steps, read_stop_at(self._run_dir, self._owner))
        return self._check.observe(now)
