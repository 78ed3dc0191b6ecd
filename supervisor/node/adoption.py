"""Which processes on this node are a lamplighter job's trainers: verified against Slurm, refused, or stale.

Adoption asks Slurm (or the head's job table, which only ever confirms) about every new process in a
Slurm step's cgroup and, every slow cycle, about every adopted one; identity.py judges each answer. A
process of another job is refused once and left alone; one of a run Slurm moved on from is stale and
fenced once that held for fencing.py's grace. JobsSeen keeps each adopted job's run directory and owner,
which the executor's run-dir copies and the settings notices need: built before both and shared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from lamplighter.configs.schema import NodeConfig
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.parsers import JobInfo
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.job_table import JobTable
from lamplighter.supervisor.metrics import DaemonMetrics
from lamplighter.supervisor.node.fencing import StaleWatch
from lamplighter.supervisor.node.identity import IdentityVerdict, verify
from lamplighter.supervisor.node.job_settings import JobSettingsCache
from lamplighter.supervisor.node.trainers import NodeTrainer, StepProcess, node_trainer
from lamplighter.supervisor.node_policy import TrainerEvent

log = logging.getLogger(__name__)

UNKNOWN_JOB_S = 60.0  # a job id Slurm said it does not know is asked about again after this long

Key = tuple[int, int]  # (pid, start time): a process, even after its PID is reused


@dataclass
class JobsSeen:
    """The run directory and owner of each Slurm job whose trainers were adopted here, kept while it matters."""

    settings: JobSettingsCache
    _seen: dict[str, tuple[str | None, int]] = field(default_factory=dict)  # job id -> (run dir, owner)

    def note(self, t: NodeTrainer) -> None:
        seen = self._seen.get(t.job_id)
        if seen is None or (seen[0] is None and t.run_dir):
            self._seen[t.job_id] = (t.run_dir, t.uid)

    def keep(self, jobs: set[str]) -> None:
        self._seen = {j: v for j, v in self._seen.items() if j in jobs}

    def run_dir_of(self, job_id: str) -> str | None:
        """The run directory of a Slurm job seen on this node (its trainers' environment, else its job.json)."""
        seen = self._seen.get(job_id)
        if seen is not None and seen[0]:
            return seen[0]
        s = self.settings.known().get(job_id)
        return s.run_dir if s is not None else None

    def uid_of(self, job_id: str) -> int | None:
        """The owner of a Slurm job seen on this node (Slurm's UserId, which its processes' uid matched)."""
        seen = self._seen.get(job_id)
        return seen[1] if seen is not None else self.settings.owner(job_id)


@dataclass
class Adoption:
    """The node's verified trainers, kept from cycle to cycle, and what was refused or found stale."""

    cfg: NodeConfig
    node: str
    api: SlurmApi
    clock: Callable[[], float]
    seen: JobsSeen
    job_table: JobTable | None = None
    metrics: DaemonMetrics | None = None
    trainers: dict[Key, NodeTrainer] = field(default_factory=dict)  # every verified process here
    killed: set[Key] = field(default_factory=set)  # processes a kill was decided for: never fenced again
    slurm_asked: int = 0  # batched job queries sent to slurmctld (the head's table spares most)

    def __post_init__(self) -> None:
        self.fencing = StaleWatch()
        self._names: dict[str, str] = {}  # job id -> its Slurm job name (asked once per job)
        self._refused: dict[Key, str] = {}  # processes that are not a lamplighter job's: why
        self._said: set[tuple[str, str]] = set()  # (job id, verdict kind) logged
        self._stale: dict[str, tuple[list[StepProcess], IdentityVerdict]] = {}  # job id -> its stale processes
        self._unknown: dict[int, float] = {}  # job id Slurm does not know -> not asked again before this time
        # job id -> the first node of its NodeList: the one daemon of a multi-node group that counts its job-level
        # events in the metrics (every node sees the group's exit; a job's fault is one fault).
        self._first_node: dict[str, str] = {}
        self._table_refused: str | None = None  # the reason last logged

    def adopt(self, found: list[StepProcess], slow: bool) -> None:
        """Verify what is new (and, every slow cycle, what was adopted) against Slurm: adopt, refuse or fence."""
        fresh = [p for p in found if p.key not in self.trainers and p.key not in self._refused]
        ask = {p.cgroup.job_id for p in fresh}
        if slow:
            ask |= {int(t.job_id) for t in self.trainers.values()}
        judged = [p for p in found if (p.key not in self.trainers or slow) and p.key not in self._refused]
        infos = self._ask(ask, judged)
        current: dict[Key, NodeTrainer] = {}
        stale: dict[str, tuple[list[StepProcess], IdentityVerdict]] = {}
        for p in found:
            have = self.trainers.get(p.key)
            if have is not None and not (slow and infos is not None):
                current[p.key] = replace(have, state=p.state)
                continue
            if have is None and p.key in self._refused:
                continue
            if infos is None:
                continue  # Slurm did not answer: nothing new is adopted (asked again next cycle)
            v = verify(p, infos.get(p.cgroup.job_id), self._names.get(p.job_id), self.node, self.cfg.job_prefix)
            if v.kind == "ours" and v.job_name is not None and v.replica_id is not None:
                info = infos[p.cgroup.job_id]
                self._first_node[p.job_id] = next(iter(expand_hostlist(info.node_list or "")), self.node)
                current[p.key] = have or node_trainer(p, v.job_name, v.replica_id, self.node, info.restarts)
            elif v.kind == "stale":
                stale.setdefault(p.job_id, ([], v))[0].append(p)
            elif v.kind == "not_ours":
                self._refused[p.key] = v.reason
            elif have is not None:
                current[p.key] = have  # its job is ending: its exit is judged as such
            if v.kind != "ours":
                self._say(p.job_id, v)
        present = {p.key for p in found}
        self._refused = {k: why for k, why in self._refused.items() if k in present}
        self.killed &= present
        self._stale = stale
        self.trainers = current
        for t in current.values():
            self.seen.note(t)

    def first_node(self, job_id: str) -> str:
        """The node that counts this job's events in the metrics (this one, when it does not know)."""
        return self._first_node.get(job_id, self.node)

    def keep(self, jobs: set[str]) -> None:
        """Forget what is kept per job, but for these."""
        self.seen.keep(jobs)
        self._first_node = {j: n for j, n in self._first_node.items() if j in jobs}

    def stale_events(self, now: float) -> list[TrainerEvent]:
        """Processes of a run Slurm has moved on from (fencing.py), once that held for the grace period."""
        out = []
        # Processes this daemon killed already (a requeue of its own, a fence): Slurm says their run is over.
        stale = {j: (procs, v) for j, (procs, v) in self._stale.items() if {p.key for p in procs} - self.killed}
        for job_id, why in self.fencing.judge(now, {j: v.reason for j, (_, v) in stale.items()}):
            procs, v = stale[job_id]
            procs = [p for p in procs if p.key not in self.killed]
            out.append(
                TrainerEvent(
                    "stale",
                    job_id,
                    -1,
                    why,
                    group=f"{v.job_name}/g{v.replica_id}",
                    pids=tuple((p.pid, p.start_time) for p in procs),
                )
            )
        return out

    def _ask(self, job_ids: set[int], judged: list[StepProcess]) -> dict[int, JobInfo] | None:
        """What Slurm says of these jobs: from the head's table where it holds them and they vouch for the
        processes judged here, else from Slurm itself. The table only ever confirms: a job it shows
        otherwise (stale, ended, unknown: maybe only older than the change) is asked again, so nothing is
        fenced or refused on a table's word."""
        got = None
        if self.job_table is not None and job_ids:
            got = self.job_table.lookup(job_ids)
            self._note_table(self.job_table.refused)
        if got is None:
            return self._ask_slurm(job_ids)
        infos, lacking = got
        for j, info in infos.items():
            self._names.setdefault(str(j), info.name)
        doubtful = {
            p.cgroup.job_id
            for p in judged
            if p.cgroup.job_id in infos
            and verify(p, infos[p.cgroup.job_id], self._names.get(p.job_id), self.node, self.cfg.job_prefix).kind
            != "ours"
        }
        ask = lacking | doubtful
        if not ask:
            return infos
        confirmed = {j: i for j, i in infos.items() if j not in ask}
        direct = self._ask_slurm(ask)
        # Slurm not answering about the rest (or knowing none of it) holds up none of what the table confirmed.
        return confirmed if direct is None else {**confirmed, **direct}

    def _note_table(self, refused: str | None) -> None:
        """The table's refusal in the metric, and in the log once per change of reason."""
        if refused != self._table_refused:
            if refused is not None:
                log.warning("the head's job table is refused, asking slurmctld instead: %s", refused)
            elif self._table_refused is not None:
                log.info("the head's job table is taken again")
            self._table_refused = refused
        if self.metrics is not None:
            self.metrics.job_table_refused.set(0 if refused is None else 1)

    def _ask_slurm(self, job_ids: set[int]) -> dict[int, JobInfo] | None:
        """One batched query for these jobs (and each new job's name, once); None when Slurm does not answer.

        A job Slurm says it does not know (its processes are another cluster's, or it was purged) is not
        asked about again for UNKNOWN_JOB_S: its processes stay unadopted and untouched meanwhile, and the
        query for the others is not failed by it."""
        now = self.clock()
        self._unknown = {j: t for j, t in self._unknown.items() if t > now}
        job_ids = {j for j in job_ids if j not in self._unknown}
        if not job_ids:
            return {}
        for j in sorted(job_ids):
            if str(j) not in self._names:
                try:
                    self._names[str(j)] = self.api.job(j).name
                except SlurmError as e:
                    if "invalid job id" in e.stderr.lower():
                        self._unknown[j] = now + UNKNOWN_JOB_S
                        log.warning("Slurm job %s: Slurm does not know it; not asked again for %g s", j, UNKNOWN_JOB_S)
                    else:
                        log.warning("Slurm job %s: cannot read its name: %s", j, e)
                except ValueError as e:
                    log.warning("Slurm job %s: cannot read its name: %s", j, e)
        job_ids = {j for j in job_ids if j not in self._unknown}
        if not job_ids:
            return {}
        try:
            self.slurm_asked += 1
            return self.api.jobs_by_id(job_ids)
        except SlurmError as e:
            log.warning("cannot ask Slurm about jobs %s: %s", sorted(job_ids), e)
            return None

    def _say(self, job_id: str, v: IdentityVerdict) -> None:
        """A process left alone, and why: logged once per job and kind of verdict."""
        if (job_id, v.kind) in self._said:
            return
        self._said.add((job_id, v.kind))
        if v.kind == "not_ours":
            log.warning("not adopting %s", v.reason)
        elif v.kind == "stale":
            log.warning("stale: %s", v.reason)
        else:
            log.info("not adopting (yet) %s", v.reason)
