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

Which processes are a job's is the kernel's and Slurm's word, never the
process's (trainers.py, identity.py): a process is adopted only when
its cgroup is a step of a RUNNING lamplighter group job on this node, with
the job's uid, started during the job's current run; one batched Slurm query
per cycle answers for every new process (and, every slow cycle, for every
job here: a job requeued while its processes live on is stale and fenced).
Anything else is left alone, with its reason logged once per job.

A group is its launcher, not every process of its job: only each numbered
step's task roots (trainers.task_roots: torchrun's agent, or the trainer
itself) are watched for their exit. torchrun restarting a worker, or a
data-loader worker ending, is no group failure. The job's lowest numbered
step here is its trainer; a higher one is the in-job spare (slurm/injob/agent.py),
never judged hung. A step ending while the job runs on and another of its
numbered steps has task roots here is a restart inside the job: nothing to
do. Hangs, D state, memory and GPU faults cover the trainer's whole tree; a
kill takes every process of the job on this node (its agent too), except a
hang in a job with in-job restarts (restart.in_job): then only the hung step
is killed, and the job's own agent starts its successor within the allocation.

Each job is judged by its own settings (job_settings.py: its job.json):
progress, hang and start-up timeouts, D-state and memory limits per job
(job_watch.py), its restart policy in the policy's context. The node config
gives the pace (poll interval) and the GPU thresholds. A job whose job.json
cannot be used gets job_settings.fallback (its hangs reported, not acted on:
the policy's context names it), and a `report` line in its run directory
saying so (job_settings.settings_notice), once per job and reason; another
once its config is applied after all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from lamplighter.configs.schema import NodeConfig
from lamplighter.lighthouse.status import fetch_status
from lamplighter.policy.observations import Observation, ProcessExited
from lamplighter.rundir.actions import RunDirActions
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.parsers import JobInfo, NodeInfo
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.checks.exit_watcher import ExitWatcher
from lamplighter.supervisor.checks.links import LinkReader
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.job_table import JobTable, table_max_age_s
from lamplighter.supervisor.metrics import DaemonMetrics
from lamplighter.supervisor.neighbour_watch import NeighbourWatch
from lamplighter.supervisor.node.fencing import StaleWatch
from lamplighter.supervisor.node.health_checks import NodeChecks
from lamplighter.supervisor.node.identity import Verdict, verify
from lamplighter.supervisor.node.job_settings import (
    JobSettings,
    JobSettingsCache,
    applied_notice,
    read_job_settings,
    settings_notice,
)
from lamplighter.supervisor.node.job_watch import Fetch, JobWatch, trainer_proc
from lamplighter.supervisor.node.lighthouse_reads import LighthouseReads, Place, lighthouse_place, table_place
from lamplighter.supervisor.node.trainers import (
    NodeTrainer,
    StepProcess,
    TrainerScanner,
    node_trainer,
    task_roots,
    trainer_step,
)
from lamplighter.supervisor.node_policy import (
    REASON_PREFIX,
    Context,
    GpuEvent,
    JobRef,
    LocalJob,
    NodeAction,
    NodeEvent,
    NodePolicyState,
    TrainerEvent,
    decide,
)
from lamplighter.system.procfs import ProcStat, read_uid, snapshot
from lamplighter.system.trainer_proc import TrainerProc

log = logging.getLogger(__name__)

CLUSTER_VIEW_S = 15.0  # how long Slurm's node list serves the drain decisions of a fault that stays

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


# While a trainer's exit awaits Slurm's word that its job ended (its exit code decides a restart), the next
# cycles come this soon: the job's end reaches slurmctld a fraction of a second after its trainer's, and a
# whole poll interval more would be most of a kill's time to act. One `scontrol show job` each; then the pace.
EXIT_RECHECK_S = (0.1, 0.2, 0.4)
UNKNOWN_JOB_S = 60.0  # a job id Slurm said it does not know is asked about again after this long


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
    wake: Callable[[], None] | None = None  # called on a trainer's exit (from the watcher's thread): cycle now
    fetch_lighthouse: Fetch | None = None  # tests: read here, in the cycle; default: LighthouseReads (off the cycle)
    read_settings: Callable[[str | None, int], JobSettings] = read_job_settings
    links: LinkReader | None = None  # tests: a sys tree of their own; default: node.yaml's network links in /sys
    job_table: JobTable | None = None  # the head's published jobs; default: cluster_status_dir's, when set
    _table_refused: str | None = None  # the reason last logged
    neighbours: NeighbourWatch | None = None  # slurmd watch for the head; default: cluster_status_dir's, when set
    policy: NodePolicyState = field(default_factory=NodePolicyState)
    trainers: dict[tuple[int, int], NodeTrainer] = field(default_factory=dict)  # every verified process here
    cycles: int = 0
    last_gpus: list[GpuObservation] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scanner = TrainerScanner(self.proc_root, self.node)
        self.exits: ExitSource = self.watcher if self.watcher is not None else ExitWatcher(self.clock, self.wake)
        self._exit_checks = 0  # cycles in a row that asked Slurm about an exit it had not yet seen end
        self.settings = JobSettingsCache(self.read_settings)
        self.watches: dict[str, JobWatch] = {}  # one per lamplighter job (run directory) with tasks here
        self._roots: dict[str, list[NodeTrainer]] = {}  # watch key -> its trainer step's task roots this cycle
        self._all_roots: list[NodeTrainer] = []  # every numbered step's task roots this cycle (spares too)
        self._snap: dict[int, ProcStat] = {}  # /proc, read once per slow cycle for every job's checks
        self._names: dict[str, str] = {}  # job id -> its Slurm job name (asked once per job)
        self._refused: dict[tuple[int, int], str] = {}  # processes that are not a lamplighter job's: why
        self._said: set[tuple[str, str]] = set()  # (job id, verdict kind) logged
        self._stale: dict[str, tuple[list[StepProcess], Verdict]] = {}  # job id -> its stale processes here
        self._promoted: dict[tuple[str, str], float] = {}  # (job id, step) -> since when it is the trainer here
        self._watched: set[tuple[int, int]] = set()  # roots given to the exit watcher
        self._by_pid: dict[int, NodeTrainer] = {}
        self._exits: dict[str, tuple[NodeTrainer, float]] = {}  # job id -> (exited task root, when)
        self._killed: set[tuple[int, int]] = set()  # processes a kill was decided for: never fenced again
        self._jobs_seen: dict[str, tuple[str | None, int]] = {}  # job id -> (its run dir, its owner), kept a while
        self._settings_refs: dict[str, JobRef] = {}  # job id -> its group and attempt here, for settings notices
        self._settings_said: dict[str, str] = {}  # job id -> the settings error its run directory was told
        # job id -> the first node of its NodeList: the one daemon of a multi-node group that counts its job-level
        # events in the metrics (every node sees the group's exit; a job's fault is one fault).
        self._first_node: dict[str, str] = {}
        self._cluster_view: tuple[float, list[NodeInfo]] | None = None
        self.fencing = StaleWatch()
        if self.job_table is None and self.cfg.cluster_status_dir:
            self.job_table = JobTable(Path(self.cfg.cluster_status_dir), table_max_age_s(self.cfg.slurm_poll_s))
        if self.neighbours is None and self.cfg.cluster_status_dir:
            self.neighbours = NeighbourWatch(Path(self.cfg.cluster_status_dir), self.node, clock=self.clock)
        self.slurm_asked = 0  # batched job queries this daemon sent slurmctld (the table spares most)
        self._unknown: dict[int, float] = {}  # job id Slurm does not know -> not asked again before this time
        self.lighthouse_reads = LighthouseReads(
            lambda address, timeout: fetch_status(address, timeout=timeout), self._lighthouse_place
        )
        self.executor.observe = self.executor.observe or self.cfg.mode == "observe"
        self.node_checks = NodeChecks(
            self.cfg,
            self.node,
            self.api,
            self.executor.state.policy_entry,
            self.executor.state.set_policy,
            self.links,
            self._cluster_nodes,
        )
        if self.executor.job_log is None:
            self.executor.job_log = RunDirActions(self.run_dir_of, self.uid_of)
        # The VM fault history outlives the daemon: a restart must not forgive a node its faults.
        vm_faults = NodePolicyState.vm_faults_from_json(self.executor.state.policy().get(VM_FAULTS_KEY))
        self.policy = NodePolicyState(self.policy.jobs, vm_faults)

    # -- the cycle -----------------------------------------------------------------

    def cycle(self) -> list[dict[str, Any]]:
        if self.neighbours is not None:
            self.neighbours.cycle()
        now = self.clock()
        slow = self.cycles % self.slow_every == 0
        self._adopt(self.scanner.scan(), now, slow)
        events: list[TrainerEvent | GpuEvent | NodeEvent] = []
        for obs in self.exits.observe(now):
            if isinstance(obs, ProcessExited):
                self._on_exit(obs)
        events += self._resolve_exits(now)
        events += self._hangs(now)
        if slow:
            events += self._slow_checks(now)
        events += self._stale_events(now)
        if self.gpus is not None:
            self.last_gpus = self.gpus.observe(now)
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
        keep = (
            {t.job_id for t in self.trainers.values()}
            | {t.job_id for t in self._by_pid.values()}  # exits not reported yet
            | set(self._exits)
            | set(self.policy.jobs)
        )
        self.settings.keep(keep)
        self._jobs_seen = {j: v for j, v in self._jobs_seen.items() if j in keep}
        self._settings_refs = {j: r for j, r in self._settings_refs.items() if j in keep}
        self._settings_said = {j: e for j, e in self._settings_said.items() if j in keep}
        self._first_node = {j: n for j, n in self._first_node.items() if j in keep}
        if self.metrics is not None:
            self.metrics.gpus(now, self.last_gpus)
            per_job: dict[str, int] = {}
            for t in self.trainers.values():
                name = t.proc.job_name or "?"
                per_job[name] = per_job.get(name, 0) + 1
            self.metrics.set_trainers(per_job)
            mine = [e for e in events if self._first_node.get(getattr(e, "job_id", ""), self.node) == self.node]
            self.metrics.trainer_faults(now, mine, {a.target for a in actions if a.kind != "report"})
        actions += self._settings_notices() + self._watch_notices()
        if not any(a.kind == "drain" for a in actions):
            actions += self.node_checks.resume(now, gpus, self._last_drain_here)
        if not actions:
            return []
        self._killed |= {pid for a in actions if a.kind == "kill_local" for pid in a.pids}
        if any(a.kind in ("drain", "resume") for a in actions):
            self._cluster_view = None  # our own change: the next decision must see it
        return self.executor.execute(now, actions)

    # -- trainers --------------------------------------------------------------------

    def _adopt(self, found: list[StepProcess], now: float, slow: bool) -> None:
        """Verify what is new (and, every slow cycle, what was adopted) against Slurm: adopt, refuse or fence."""
        fresh = [p for p in found if p.key not in self.trainers and p.key not in self._refused]
        ask = {p.cgroup.job_id for p in fresh}
        if slow:
            ask |= {int(t.job_id) for t in self.trainers.values()}
        judged = [p for p in found if (p.key not in self.trainers or slow) and p.key not in self._refused]
        infos = self._ask(ask, judged)
        current: dict[tuple[int, int], NodeTrainer] = {}
        stale: dict[str, tuple[list[StepProcess], Verdict]] = {}
        for p in found:
            have = self.trainers.get(p.key)
            if have is not None and not (slow and infos is not None):
                current[p.key] = replace(have, proc=replace(have.proc, state=p.state))
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
        self._killed &= present
        self._stale = stale
        self.trainers = current
        for t in current.values():
            seen = self._jobs_seen.get(t.job_id)
            if seen is None or (seen[0] is None and t.run_dir):
                self._jobs_seen[t.job_id] = (t.run_dir, t.uid)
        roots = task_roots(list(current.values()))
        for t in roots:
            if t.key not in self._watched:
                log.info(
                    "watching task root pid %d of Slurm job %s step %s (%s, uid %d, restart %d)",
                    t.proc.pid,
                    t.job_id,
                    t.step,
                    t.proc.job_name,
                    t.uid,
                    t.attempt,
                )
                self._watched.add(t.key)
                self._by_pid[t.proc.pid] = t
                self.exits.watch_trainer(trainer_proc(t))
        self._watched &= set(current)
        self._all_roots = roots
        self._group_by_job(self._trainer_roots(roots, now), now)

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

    def _say(self, job_id: str, v: Verdict) -> None:
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

    def _trainer_roots(self, roots: list[NodeTrainer], now: float) -> list[NodeTrainer]:
        """Each job's trainer step's roots (its lowest numbered step here), started when that step became it."""
        by_job: dict[str, list[NodeTrainer]] = {}
        for t in self.trainers.values():
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
            self._settings_refs[t.job_id] = (t.job_id, f"{t.proc.job_name}/g{t.proc.replica_id}", t.attempt)
            key = t.run_dir or s.run_dir or f"slurm-job-{t.job_id}"
            first = key not in self._roots
            self._roots.setdefault(key, []).append(t)
            if key not in self.watches:
                fetch = self.fetch_lighthouse or self.lighthouse_reads.reader(t.proc.job_name, t.uid)
                self.watches[key] = JobWatch(
                    t.proc.job_name,
                    t.run_dir or s.run_dir,
                    s,
                    fetch,
                    lighthouse_timeout_s(self.cfg.health.poll_interval_s),
                    self.proc_root,
                    lambda: self._snap,
                    self.metrics,
                    owner=t.uid,
                )
            elif first:
                self.watches[key].use(s)  # the job's first task decides (every group of a job has one job.json)
        for key in [k for k in self.watches if k not in self._roots]:
            gone = self.watches.pop(key)
            if self.metrics is not None and not any(w.name == gone.name for w in self.watches.values()):
                self.metrics.job_watch_ended(gone.name)
        self.lighthouse_reads.forget({(t.proc.job_name, t.uid) for ts in self._roots.values() for t in ts})

    def _on_exit(self, obs: ProcessExited) -> None:
        t = self._by_pid.pop(obs.pid, None)
        if t is not None and t.job_id not in self._exits:
            self._exits[t.job_id] = (t, obs.t)
            # Its settings may have been forgotten when the process left /proc a cycle before its exit was
            # reported: the exit must be judged by the job's own restart policy, never the defaults.
            self.settings.get(t.job_id, t.uid, t.config, obs.t)

    def next_cycle_in(self, interval: float) -> float:
        """Seconds from this cycle's start to the next: the poll interval, or sooner while an exit awaits Slurm."""
        if not self._exits or not 0 < self._exit_checks <= len(EXIT_RECHECK_S):
            return interval
        return min(interval, EXIT_RECHECK_S[self._exit_checks - 1])

    def _resolve_exits(self, now: float) -> list[TrainerEvent]:
        self._exit_checks = self._exit_checks + 1 if self._exits else 0
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
            if info.state == "RUNNING" and (others := self._other_steps(t)):
                # The job's own agent started the trainer's successor (the spare, or a cold step) in the
                # allocation; or a spare ended beside a live trainer.
                del self._exits[job_id]
                log.info(
                    "%s group %s: step %s ended (pid %d) while step(s) %s of Slurm job %s run here: "
                    "restarted in the job, nothing to do",
                    t.proc.job_name,
                    t.proc.replica_id,
                    t.step,
                    t.proc.pid,
                    ",".join(others),
                    job_id,
                )
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

    def _other_steps(self, t: NodeTrainer) -> list[str]:
        """Numbered steps of t's job, other than t's, with task roots here now."""
        return sorted({r.step for r in self._all_roots if r.job_id == t.job_id and r.step != t.step}, key=int)

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
        return out

    def _stale_events(self, now: float) -> list[TrainerEvent]:
        """Processes of a run Slurm has moved on from (fencing.py), once that held for the grace period."""
        out = []
        # Processes this daemon killed already (a requeue of its own, a fence): Slurm says their run is over.
        stale = {j: (procs, v) for j, (procs, v) in self._stale.items() if {p.key for p in procs} - self._killed}
        for job_id, why in self.fencing.judge(now, {j: v.reason for j, (_, v) in stale.items()}):
            procs, v = stale[job_id]
            procs = [p for p in procs if p.key not in self._killed]
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

    # -- context ---------------------------------------------------------------------

    def _context(self, now: float, gpu_fault: bool) -> Context:
        jobs: dict[str, LocalJob] = {}
        for t in self.trainers.values():
            j = jobs.get(t.job_id)
            pid = (t.proc.pid, t.proc.start_time)
            pids = (j.pids if j else ()) + (pid,)
            steps = dict(j.steps if j else {})
            steps[t.step] = steps.get(t.step, ()) + (pid,)
            jobs[t.job_id] = LocalJob(
                t.job_id, t.proc.job_name, t.proc.replica_id, t.attempt, pids, t.renewals, t.uid, steps
            )
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
        for job_id, ref in sorted(self._settings_refs.items()):
            s = known.get(job_id)
            if s is None:
                continue
            said = self._settings_said.get(job_id)
            observation = {"type": "settings", "config": s.source, "error": s.error, "hangs": s.hangs}
            if s.error is not None and said != s.error and self.settings.settled(job_id) and self.run_dir_of(job_id):
                self._settings_said[job_id] = s.error
                out.append(NodeAction("report", job_id, settings_notice(s), observation, group=ref[1], jobs=(ref,)))
            elif s.error is None and said is not None:
                del self._settings_said[job_id]
                out.append(NodeAction("report", job_id, applied_notice(s), observation, group=ref[1], jobs=(ref,)))
        return out

    def _watch_notices(self) -> list[NodeAction]:
        """What a job's watch has to tell its run directory (its Lighthouse's page unreadable, and readable
        again: job_watch.py), as a `report` about every group of the job here."""
        out = []
        for key, w in self.watches.items():
            roots = self._roots.get(key, [])
            refs = tuple(dict.fromkeys(self._settings_refs[t.job_id] for t in roots if t.job_id in self._settings_refs))
            for notice in w.take_notices():
                if refs:
                    observation = {"type": "lighthouse", "address": w.address, "error": w.lighthouse.error}
                    out.append(NodeAction("report", refs[0][0], notice, observation, group=refs[0][1], jobs=refs))
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

    def run_dir_of(self, job_id: str) -> str | None:
        """The run directory of a Slurm job seen on this node (its trainers' environment, else its job.json)."""
        seen = self._jobs_seen.get(job_id)
        if seen is not None and seen[0]:
            return seen[0]
        s = self.settings.known().get(job_id)
        return s.run_dir if s is not None else None

    def uid_of(self, job_id: str) -> int | None:
        """The owner of a Slurm job seen on this node (Slurm's UserId, which its processes' uid matched)."""
        seen = self._jobs_seen.get(job_id)
        return seen[1] if seen is not None else self.settings.owner(job_id)

    def status(self) -> dict[str, Any]:
        by_job: dict[str, list[NodeTrainer]] = {}
        for t in self.trainers.values():
            by_job.setdefault(t.job_id, []).append(t)
        steps = {job: trainer_step(ts) for job, ts in by_job.items()}

        def row(t: NodeTrainer) -> dict[str, Any]:
            return {
                "pid": t.proc.pid,
                "job_id": t.job_id,
                "job": t.proc.job_name,
                "replica_id": t.proc.replica_id,
                "attempt": t.attempt,
                "step": t.step,
                "uid": t.uid,
                "root": t.key in self._watched,
            }

        # Task roots (the watched launchers) first, then their children.
        order = sorted(self.trainers.values(), key=lambda t: (t.key not in self._watched, t.proc.pid))
        return {
            "role": "compute",
            "node": self.node,
            "cycles": self.cycles,
            "trainers": [row(t) for t in order if t.step == steps.get(t.job_id)],
            "spares": [row(t) for t in order if t.step_number is not None and t.step != steps.get(t.job_id)],
            "agents": [row(t) for t in order if t.step_number is None],  # each group's batch step
            "jobs": [w.status() for w in self.watches.values()],
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
