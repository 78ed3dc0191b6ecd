"""Finding the trainer processes of lamplighter jobs on this node.

A process is a lamplighter trainer when its environment (/proc/PID/environ,
the environment it was exec'd with) carries LAMPLIGHTER_JOB, which the
launcher sets for every trainer. Slurm's own variables say which job, step and
task it belongs to. The process name is never looked at: anything can call
itself "python". A record also carries the process's start time (clock ticks
since boot, /proc/PID/stat field 22) so that (pid, start_time) identifies the
process even after its PID is reused.

Reading another user's environ needs ptrace-read access (root with
CAP_SYS_PTRACE); processes we may not read are skipped, never guessed at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lamplighter.rundir.contract import ENV_JOB, ENV_REPLICA_ID
from lamplighter.system.procfs import ProcStat, read_environ, read_stat

SLURM_JOB_ID = "SLURM_JOB_ID"
SLURM_STEP_ID = "SLURM_STEP_ID"
SLURM_PROCID = "SLURM_PROCID"


@dataclass(frozen=True)
class TrainerProcess:
    pid: int
    ppid: int
    start_time: int  # clock ticks after boot: with pid, the process's identity
    state: str  # R, S, D, Z, ... (/proc/PID/stat field 3)
    job_name: str  # LAMPLIGHTER_JOB
    replica_id: int | None
    job_id: str | None  # Slurm job id; None on bare metal
    step: str | None
    procid: int | None

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_time)


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def identify(pid: int, stat: ProcStat, env: Mapping[str, str]) -> TrainerProcess | None:
    """The trainer record for a process, or None if it is not a lamplighter trainer."""
    job_name = env.get(ENV_JOB)
    if not job_name:
        return None
    return TrainerProcess(
        pid=pid,
        ppid=stat.ppid,
        start_time=stat.start_time,
        state=stat.state,
        job_name=job_name,
        replica_id=_int_or_none(env.get(ENV_REPLICA_ID)),
        job_id=env.get(SLURM_JOB_ID) or None,
        step=env.get(SLURM_STEP_ID) or None,
        procid=_int_or_none(env.get(SLURM_PROCID)),
    )


def read_process(proc_root: Path, pid: int) -> TrainerProcess | None:
    """One process, or None if it is not a trainer, is gone, or may not be read."""
    stat = read_stat(proc_root, pid)
    env = read_environ(proc_root, pid) if stat is not None else None
    # Gone (exited between listing and reading), not ours to read, or a zombie.
    if stat is None or env is None or stat.state == "Z":
        return None
    return identify(pid, stat, env)


def find_trainers(proc_root: Path, job_names: Iterable[str] | None = None) -> list[TrainerProcess]:
    """Every lamplighter trainer process under proc_root, by pid; optionally only these jobs."""
    wanted = set(job_names) if job_names is not None else None
    out: list[TrainerProcess] = []
    try:
        entries = list(proc_root.iterdir())
    except OSError as e:
        raise OSError(e.errno, f"discovery: cannot list {proc_root}: {e.strerror}") from e
    for entry in entries:
        if not entry.name.isdigit():
            continue
        rec = read_process(proc_root, int(entry.name))
        if rec is not None and (wanted is None or rec.job_name in wanted):
            out.append(rec)
    return sorted(out, key=lambda r: r.pid)


def roots(trainers: Iterable[TrainerProcess]) -> list[TrainerProcess]:
    """The top processes: those whose parent is not itself a trainer (children inherit the environment)."""
    items = list(trainers)
    pids = {t.pid for t in items}
    return [t for t in items if t.ppid not in pids]
