"""The trainer tasks of lamplighter jobs on this node, found by their environment and confirmed with Slurm.

discovery.py says which processes carry LAMPLIGHTER_JOB; this adds what the
node daemon needs on top:
- only Slurm step tasks count (SLURM_STEP_ID set): the batch shell and srun
  of the same job carry the same variables but are not trainers;
- only this node's (SLURMD_NODENAME): on the single-machine test cluster all
  "nodes" share one kernel and one /proc, so one daemon per node name runs on
  the same machine and each must see only its own node's tasks; on a real
  cluster every process of the host has the same SLURMD_NODENAME anyway;
- only this cluster's, when the daemon is given a SLURM_CONF and the process
  carries one (several test clusters on one machine);
- the environment is read once per process (pid + start time), so a cycle
  costs one listdir and a stat read per new PID, not an environ read per process.
Every process of a task carries its environment (torchrun's workers, data
loader and compile workers): `task_roots` picks the process slurmstepd started
(after the task wrapper's exec), the group's launcher on this node, whose exit
is the group's; its children are covered through its process tree.
Whether the Slurm job really is a lamplighter job (its name) is checked by
the caller against Slurm (`expected_job_name`), before anything is done to it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lamplighter.configs.slurm_names import group_job_name
from lamplighter.supervisor.discovery import TrainerProcess, identify
from lamplighter.supervisor.procfs import boot_time, ns_pid, pids, read_environ, read_stat
from lamplighter.trainer.contract import ENV_ATTEMPT, ENV_CONFIG, ENV_RENEWALS, ENV_RUN_DIR

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class NodeTrainer:
    proc: TrainerProcess
    node: str | None  # SLURMD_NODENAME
    run_dir: str | None  # LAMPLIGHTER_RUN_DIR
    attempt: int  # LAMPLIGHTER_ATTEMPT, else SLURM_RESTART_COUNT, else 0
    slurm_conf: str | None
    started_at: float  # epoch seconds
    ns_pid: int  # its PID inside its own PID namespace (what it writes in its heartbeat); pid outside one
    config: str | None = None  # LAMPLIGHTER_CONFIG: the job's resolved config (job.json)
    renewals: int = 0  # LAMPLIGHTER_RENEWALS: how many of its restarts were renewals before the time limit

    @property
    def job_id(self) -> str:
        assert self.proc.job_id is not None
        return self.proc.job_id

    @property
    def rank(self) -> int:
        return self.proc.procid or 0

    @property
    def key(self) -> tuple[int, int]:
        return self.proc.key


def expected_job_name(prefix: str, trainer: NodeTrainer) -> str:
    """The Slurm job name a lamplighter group's job has (configs/slurm_names.py, as render.py names it)."""
    return group_job_name(trainer.proc.job_name, trainer.proc.replica_id, prefix)


def task_roots(trainers: list[NodeTrainer]) -> list[NodeTrainer]:
    """The tasks' root processes: those whose parent is not a process of the same Slurm job.

    A child (a torchrun worker, a data-loader worker) inherits the job's environment;
    its exit is its launcher's business (torchrun restarts workers), not a group failure.
    """
    of_job = {(t.job_id, t.proc.pid) for t in trainers}
    return [t for t in trainers if (t.job_id, t.proc.ppid) not in of_job]


def _int(value: str | None, default: int = 0) -> int:
    try:
        return int(value) if value else default
    except ValueError:
        return default


FULL_RESCAN_EVERY = 10


class TrainerScanner:
    """Finds this node's trainer tasks; remembers what it learned about each (pid, start time)."""

    def __init__(self, proc_root: Path, node: str, slurm_conf: str | None = None) -> None:
        self.proc_root = proc_root
        self.node = node
        self.slurm_conf = slurm_conf
        self._btime = boot_time(proc_root)
        self._known: dict[int, tuple[int, NodeTrainer | None]] = {}  # pid -> (start_time, record or not ours)
        self._scans = 0

    def scan(self) -> list[NodeTrainer]:
        out: list[NodeTrainer] = []
        seen: dict[int, tuple[int, NodeTrainer | None]] = {}
        # Reading every process's stat each cycle was most of the daemon's CPU. A pid already known
        # not to be a trainer is skipped between full rescans, so a trainer that reuses such a pid,
        # or execs after being seen, is noticed at the next full rescan (at most FULL_RESCAN_EVERY cycles).
        full = self._scans % FULL_RESCAN_EVERY == 0
        self._scans += 1
        for pid in pids(self.proc_root):
            cached = self._known.get(pid)
            if not full and cached is not None and cached[1] is None:
                seen[pid] = cached
                continue
            stat = read_stat(self.proc_root, pid)
            if stat is None:
                continue
            same = cached is not None and cached[0] == stat.start_time
            # A full rescan also re-reads known non-trainers' environ: one seen between slurmstepd's fork
            # and its exec of the task keeps its pid and start time but gains the trainer's environment.
            rec = cached[1] if same and cached is not None and (cached[1] is not None or not full) else self._read(pid)
            seen[pid] = (stat.start_time, rec)
            if rec is not None and stat.state != "Z":
                out.append(rec)
        # A task's root seen before its exec is cached as no trainer until the next full rescan; a child
        # carrying the job's environment gives it away now, so the child is never mistaken for the root.
        for ppid in sorted({t.proc.ppid for t in out}):
            cached = seen.get(ppid)
            if cached is not None and cached[1] is None and (parent := self._read(ppid)) is not None:
                seen[ppid] = (parent.proc.start_time, parent)
                if parent.proc.state != "Z":
                    out.append(parent)
        self._known = seen
        return sorted(out, key=lambda t: t.proc.pid)

    def _read(self, pid: int) -> NodeTrainer | None:
        stat = read_stat(self.proc_root, pid)
        env = read_environ(self.proc_root, pid) if stat is not None else None
        if stat is None or env is None:
            return None
        proc = identify(pid, stat, env)
        if proc is None or proc.job_id is None or proc.step is None:
            return None
        node = env.get("SLURMD_NODENAME")
        if node is not None and node != self.node:
            return None
        conf = env.get("SLURM_CONF")
        if (
            self.slurm_conf is not None
            and conf is not None
            and os.path.realpath(conf) != os.path.realpath(self.slurm_conf)
        ):
            return None
        attempt = _int(env.get(ENV_ATTEMPT), _int(env.get("SLURM_RESTART_COUNT")))
        return NodeTrainer(
            proc,
            node,
            env.get(ENV_RUN_DIR),
            attempt,
            conf,
            self._btime + stat.start_time / CLK_TCK,
            ns_pid(self.proc_root, pid),
            env.get(ENV_CONFIG) or None,
            _int(env.get(ENV_RENEWALS)),
        )
