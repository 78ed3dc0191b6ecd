"""The processes of Slurm jobs on this node, found by their cgroup, and which of them are lamplighter trainers.

What a process says about itself (its environment) decides nothing here. The
scanner lists the processes the kernel places in a Slurm step's cgroup on this
node (slurm/step_cgroup.py: `job_<J>/step_<S>`, and on a multiple-slurmd host
such as the test cluster, whose nodes share one kernel and one /proc, the
node's own `slurm_<node>` tree), with their real uid and start time.
`identity.verify` then holds each one against Slurm (one batched query
per cycle): only a process of a RUNNING lamplighter group job, with the job's
uid, on one of the job's nodes and started during its current run is adopted.

Inside a verified job, the job's own words may steer what is done to that job
only: its trainers' environment names the run directory, the config
(job.json) and the renewal count; a process that merely carries another
job's variables is in another cgroup and gets nothing.

A job's steps on a node: `batch` (the group script and its in-job agent,
slurm/injob/agent.py), numbered srun steps, `extern` (ssh sessions pam_slurm_adopt
adopts: left to Slurm). The lowest numbered step with processes here is the
trainer; higher ones are the in-job spare (or the trainer's cold successor
starting). `task_roots` are the processes slurmstepd started (their parent,
slurmstepd, sits outside the step's cgroup): a group's launcher on this node
(torchrun's agent, or the trainer itself), whose exit is the group's.

The cgroup is read once per process (pid + start time), so a cycle costs one
listdir and a stat per new PID.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from lamplighter.rundir.contract import ENV_ATTEMPT, ENV_CONFIG, ENV_RENEWALS, ENV_RUN_DIR
from lamplighter.slurm.step_cgroup import StepCgroup, parse_cgroup
from lamplighter.system.procfs import boot_time, ns_pid, pids, read_cgroup, read_environ, read_stat, read_uid

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
FULL_RESCAN_EVERY = 10


@dataclass(frozen=True)
class StepProcess:
    """A process the kernel places in a Slurm step on this node: what is known before Slurm is asked."""

    pid: int
    ppid: int
    start_time: int  # clock ticks after boot: with pid, the process's identity
    state: str
    uid: int  # real uid (/proc/PID/status)
    cgroup: StepCgroup
    started_at: float  # epoch seconds
    ns_pid: int  # its PID inside its own PID namespace (what it writes in its heartbeat)
    env: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)  # exec-time, for steering only

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_time)

    @property
    def job_id(self) -> str:
        return str(self.cgroup.job_id)


@dataclass(frozen=True)
class NodeTrainer:
    """A verified process of a lamplighter group job on this node.

    Three records of a process on the daemon's path, each for a reason: StepProcess is what the kernel says
    before Slurm is asked (never acted on), NodeTrainer what Slurm vouched for, and system/trainer_proc.py's
    TrainerProc the one view every runtime's checks share (local mode and bare metal have no Slurm)."""

    pid: int
    ppid: int
    start_time: int  # clock ticks after boot: with pid, the process's identity
    state: str  # R, S, D, Z, ... (/proc/PID/stat field 3)
    job_name: str  # from Slurm's job name
    replica_id: int  # from Slurm's job name
    job_id: str  # Slurm job id, from the step's cgroup
    step: str  # the Slurm step, from the cgroup: "batch", "extern" or a number
    procid: int | None  # SLURM_PROCID: the rank within the step
    node: str
    run_dir: str | None  # LAMPLIGHTER_RUN_DIR (the job's own word, about itself)
    attempt: int  # Slurm's Restarts of the job
    uid: int
    started_at: float  # epoch seconds
    ns_pid: int
    config: str | None = None  # LAMPLIGHTER_CONFIG: the job's resolved config (job.json)
    renewals: int = 0  # LAMPLIGHTER_RENEWALS: how many of its restarts were renewals before the time limit
    trainer_attempt: int = 0  # LAMPLIGHTER_ATTEMPT: the trainer's own count (heartbeats name it)

    @property
    def step_number(self) -> int | None:
        return int(self.step) if self.step.isdigit() else None

    @property
    def rank(self) -> int:
        return self.procid or 0

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_time)


def _int(value: str | None, default: int = 0) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default


def node_trainer(p: StepProcess, job_name: str, replica_id: int, node: str, restarts: int) -> NodeTrainer:
    """The record of a verified process (identity.verify said so)."""
    env = p.env
    procid = env.get("SLURM_PROCID")
    return NodeTrainer(
        p.pid,
        p.ppid,
        p.start_time,
        p.state,
        job_name,
        replica_id,
        p.job_id,
        p.cgroup.step,
        int(procid) if procid is not None and procid.isdigit() else None,
        node,
        env.get(ENV_RUN_DIR) or None,
        restarts,
        p.uid,
        p.started_at,
        p.ns_pid,
        env.get(ENV_CONFIG) or None,
        _int(env.get(ENV_RENEWALS)),
        _int(env.get(ENV_ATTEMPT), restarts * 100),
    )


def trainer_step(trainers: list[NodeTrainer]) -> str | None:
    """The job's trainer step here: its lowest numbered step with a live process (higher ones are spares)."""
    numbered = [n for t in trainers if t.state != "Z" and (n := t.step_number) is not None]
    return str(min(numbered)) if numbered else None


def task_roots(trainers: list[NodeTrainer]) -> list[NodeTrainer]:
    """The numbered steps' root processes: those whose parent is not a process of the same job and step.

    A child (a torchrun worker, a data-loader worker) is its launcher's business (torchrun restarts
    workers), not a group failure; the batch step (the group script, the in-job agent) is no trainer."""
    of_step = {(t.job_id, t.step, t.pid) for t in trainers}
    return [t for t in trainers if t.step_number is not None and (t.job_id, t.step, t.ppid) not in of_step]


class TrainerScanner:
    """Finds this node's Slurm step processes; remembers what it learned about each (pid, start time)."""

    def __init__(self, proc_root: Path, node: str) -> None:
        self.proc_root = proc_root
        self.node = node
        self._btime = boot_time(proc_root)
        # pid -> (start time, comm, record or none). An exec keeps pid and start time but changes comm: a task
        # read between slurmstepd's fork and its exec carries slurmstepd's environment and uid, so its record
        # is read again once it has exec'd (a cached pre-exec record lost a job's config for good).
        self._known: dict[int, tuple[int, str, StepProcess | None]] = {}
        self._scans = 0

    def scan(self) -> list[StepProcess]:
        out: list[StepProcess] = []
        seen: dict[int, tuple[int, str, StepProcess | None]] = {}
        # Reading every process's stat each cycle was most of the daemon's CPU. A pid already known to be
        # in no step is skipped between full rescans, so a process slurmstepd moves into a step after it
        # was seen is noticed at the next full rescan (at most FULL_RESCAN_EVERY cycles), or through a child.
        full = self._scans % FULL_RESCAN_EVERY == 0
        self._scans += 1
        for pid in pids(self.proc_root):
            cached = self._known.get(pid)
            if not full and cached is not None and cached[2] is None:
                seen[pid] = cached
                continue
            stat = read_stat(self.proc_root, pid)
            if stat is None:
                continue
            same = cached is not None and cached[:2] == (stat.start_time, stat.comm)
            rec = cached[2] if same and cached is not None and (cached[2] is not None or not full) else self._read(pid)
            if rec is not None and not rec.env:
                # Read in the middle of its exec: the kernel names the new program before its environment is in
                # place, which reads empty until then. Unknown for now, read again next cycle (make scale: a
                # cached empty record lost a restarted group's config, and with it its hang check).
                continue
            if rec is not None and rec.state != stat.state:
                rec = replace(rec, state=stat.state)
            seen[pid] = (stat.start_time, stat.comm, rec)
            if rec is not None and stat.state != "Z":
                out.append(rec)
        # A task's root seen before slurmstepd moved it is cached as none until the next full rescan; a child
        # in the step gives it away now, so the child is never mistaken for the root.
        for ppid in sorted({p.ppid for p in out}):
            cached = seen.get(ppid)
            if cached is not None and cached[2] is None and (parent := self._read(ppid)) is not None:
                seen[ppid] = (parent.start_time, cached[1], parent)
                if parent.state != "Z":
                    out.append(parent)
        self._known = seen
        return sorted(out, key=lambda p: p.pid)

    def _read(self, pid: int) -> StepProcess | None:
        stat = read_stat(self.proc_root, pid)
        text = read_cgroup(self.proc_root, pid) if stat is not None else None
        cg = parse_cgroup(text) if text is not None else None
        if stat is None or cg is None or cg.step == "extern":
            return None
        if cg.node is not None and cg.node != self.node:
            return None  # another node's slurmd on this host (the test cluster)
        uid = read_uid(self.proc_root, pid)
        if uid is None:
            return None
        env = read_environ(self.proc_root, pid) or {}
        return StepProcess(
            pid,
            stat.ppid,
            stat.start_time,
            stat.state,
            uid,
            cg,
            self._btime + stat.start_time / CLK_TCK,
            ns_pid(self.proc_root, pid),
            env,
        )
