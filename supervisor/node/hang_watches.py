"""The hang, D-state and memory watches of the jobs whose trainers run here: one JobWatch per job.

A job's trainer step is its lowest numbered step here; a higher one is the in-job spare, never judged
hung. A step is watched from when it became the trainer (a promoted spare's silence before counts for
nothing). Each job (run directory) gets its watch on first sight, judged by the job's own settings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lamplighter.configs.schema import NodeConfig
from lamplighter.rundir.contract import lighthouse_address
from lamplighter.supervisor.metrics import DaemonMetrics
from lamplighter.supervisor.node.job_settings import JobSettingsCache
from lamplighter.supervisor.node.job_watch import AddressReader, Fetch, JobWatch
from lamplighter.supervisor.node.lighthouse_reads import LighthouseReads
from lamplighter.supervisor.node.trainers import NodeTrainer, trainer_step
from lamplighter.supervisor.node_policy import JobRef, NodeAction, TrainerEvent
from lamplighter.system.procfs import ProcStat, snapshot


def lighthouse_timeout_s(poll_interval_s: float) -> float:
    """A Lighthouse read's bound: well below a poll interval, so a dead one never stalls the cycle."""
    return min(1.0, poll_interval_s / 4)


@dataclass
class HangWatches:
    cfg: NodeConfig
    settings: JobSettingsCache
    lighthouse_reads: LighthouseReads
    proc_root: Path = Path("/proc")
    fetch_lighthouse: Fetch | None = None  # tests: read here, in the cycle; default: the LighthouseReads
    metrics: DaemonMetrics | None = None
    read_address: AddressReader = lighthouse_address  # the daemon's: as the job's user (user_reads)

    def __post_init__(self) -> None:
        self.watches: dict[str, JobWatch] = {}  # one per lamplighter job (run directory) with tasks here
        self._roots: dict[str, list[NodeTrainer]] = {}  # watch key -> its trainer step's task roots this cycle
        self._promoted: dict[tuple[str, str], float] = {}  # (job id, step) -> since when it is the trainer here
        self._snap: dict[int, ProcStat] = {}  # /proc, read once per slow cycle for every job's checks
        self.refs: dict[str, JobRef] = {}  # job id -> its group and attempt here (for the run dir's notices)

    def update(self, trainers: list[NodeTrainer], roots: list[NodeTrainer], now: float) -> None:
        """This cycle's verified trainers and every numbered step's task roots: who each job's watch holds."""
        self._group_by_job(self._trainer_roots(trainers, roots, now), now)

    def hangs(self, now: float, exiting: set[str]) -> list[TrainerEvent]:
        out = []
        for key, w in self.watches.items():
            # A job whose launcher exited is being resolved through Slurm: its silence is no news.
            w.set_roots([t for t in self._roots.get(key, []) if t.job_id not in exiting])
            out += w.hangs(now)
        return out

    def stuck(self, now: float) -> list[TrainerEvent]:
        """D state and memory: one read of /proc for every job's checks (the slow cycles)."""
        self._snap = snapshot(self.proc_root)
        out = []
        for w in self.watches.values():
            out += w.stuck(now)
        return out

    def keep(self, jobs: set[str]) -> None:
        self.refs = {j: r for j, r in self.refs.items() if j in jobs}

    def notices(self) -> list[NodeAction]:
        """What a job's watch has to tell its run directory (its Lighthouse's page unreadable, and readable
        again: job_watch.py), as a `report` about every group of the job here."""
        out = []
        for key, w in self.watches.items():
            roots = self._roots.get(key, [])
            refs = tuple(dict.fromkeys(self.refs[t.job_id] for t in roots if t.job_id in self.refs))
            for notice in w.take_notices():
                if refs:
                    observation = {"type": "lighthouse", "address": w.address, "error": w.lighthouse.error}
                    out.append(NodeAction("report", refs[0][0], notice, observation, group=refs[0][1], jobs=refs))
        return out

    def status(self) -> list[dict[str, Any]]:
        return [w.status() for w in self.watches.values()]

    def _trainer_roots(self, trainers: list[NodeTrainer], roots: list[NodeTrainer], now: float) -> list[NodeTrainer]:
        """Each job's trainer step's roots (its lowest numbered step here), started when that step became it."""
        by_job: dict[str, list[NodeTrainer]] = {}
        for t in trainers:
            by_job.setdefault(t.job_id, []).append(t)
        steps = {job: trainer_step(ts) for job, ts in by_job.items()}
        promoted: dict[tuple[str, str], float] = {}
        out = []
        for t in roots:
            step = steps.get(t.job_id)
            if step is None or t.step != step:
                continue  # a spare: never judged hung, never counted as the trainer
            key = (t.job_id, step)
            first_sight = not any(j == t.job_id for j, _ in self._promoted)
            since = self._promoted.get(key, t.started_at if first_sight else now)
            promoted[key] = since
            out.append(replace(t, started_at=max(t.started_at, since)))
        self._promoted = promoted
        return out

    def _group_by_job(self, roots: list[NodeTrainer], now: float) -> None:
        """Trainer roots by lamplighter job (run directory): each job's watch, made on first sight, kept while here."""
        self._roots = {}
        for t in roots:
            s = self.settings.get(t.job_id, t.uid, t.config, now)
            self.refs[t.job_id] = (t.job_id, f"{t.job_name}/g{t.replica_id}", t.attempt)
            key = t.run_dir or s.run_dir or f"slurm-job-{t.job_id}"
            first = key not in self._roots
            self._roots.setdefault(key, []).append(t)
            if key not in self.watches:
                fetch = self.fetch_lighthouse or self.lighthouse_reads.reader(t.job_name, t.uid)
                self.watches[key] = JobWatch(
                    t.job_name,
                    t.run_dir or s.run_dir,
                    s,
                    fetch,
                    lighthouse_timeout_s(self.cfg.health.poll_interval_s),
                    self.proc_root,
                    lambda: self._snap,
                    self.metrics,
                    owner=t.uid,
                    read_address=self.read_address,
                )
            elif first:
                self.watches[key].use(s)  # the job's first task decides (every group of a job has one job.json)
        for key in [k for k in self.watches if k not in self._roots]:
            gone = self.watches.pop(key)
            if self.metrics is not None and not any(w.name == gone.name for w in self.watches.values()):
                self.metrics.job_watch_ended(gone.name)
        self.lighthouse_reads.forget({(t.job_name, t.uid) for ts in self._roots.values() for t in ts})
