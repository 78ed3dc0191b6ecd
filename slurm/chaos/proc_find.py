"""Finding the processes chaos may hit: by their environment or by the port they listen on, never by name.

On the test cluster every node is this machine and each node's processes sit
in their own PID namespace; from the root namespace /proc shows them all with
their real PIDs. A process is identified by (pid, start time) so a signal
never reaches a process that reused a PID.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from lamplighter.rundir.contract import ENV_JOB, ENV_REPLICA_ID
from lamplighter.slurm.step_cgroup import parse_cgroup
from lamplighter.system import procfs
from lamplighter.system.procfs import PROC, ProcStat

# Set only by the task wrapper of a rendered group script (and by local mode's launcher) in the
# trainer's own environment: the batch shell and srun carry LAMPLIGHTER_JOB too, but not RANK.
TRAINER_MARK = "RANK"
# The e2e harness and the demo start each node daemon with this set to the node's name.
ENV_SUPERVISOR_NODE = "LAMPLIGHTER_SUPERVISOR_NODE"


def _other_processes(proc: Path) -> Iterator[ProcStat]:
    """Every process but this one (those gone between listing and reading are skipped)."""
    for pid in procfs.pids(proc):
        if pid != os.getpid() and (st := procfs.read_stat(proc, pid)) is not None:
            yield st


def find_by_env(match: Callable[[Mapping[str, str]], bool], proc: Path = PROC) -> list[ProcStat]:
    """Live (not zombie) processes whose exec-time environment satisfies `match`."""
    out: list[ProcStat] = []
    for st in _other_processes(proc):
        if st.state in ("Z", "X"):
            continue
        env = procfs.read_environ(proc, st.pid)
        if env is not None and match(env):
            out.append(st)
    return sorted(out, key=lambda p: p.pid)


def trainer_procs(job: str, replica_id: int, proc: Path = PROC) -> list[ProcStat]:
    """The trainer processes of one replica group (all its ranks, on every node).

    A group's job may hold a warm spare step beside its trainer's (slurm/injob/agent.py), whose tasks carry the
    same environment: the trainer is the lowest numbered Slurm step of its job (the cgroup says which), and
    a spare that took over is the trainer from then on."""
    rid = str(replica_id)
    found = find_by_env(lambda e: e.get(ENV_JOB) == job and e.get(ENV_REPLICA_ID) == rid and TRAINER_MARK in e, proc)
    return in_trainer_steps(found, proc)


def in_trainer_steps(procs: list[ProcStat], proc: Path = PROC) -> list[ProcStat]:
    """Those of `procs` in their Slurm job's lowest numbered step among them (all of them outside Slurm)."""
    steps: dict[int, int] = {}
    where: dict[int, tuple[int, int] | None] = {}
    for st in procs:
        text = procfs.read_cgroup(proc, st.pid)
        cg = parse_cgroup(text) if text is not None else None
        n = None if cg is None else cg.numbered
        where[st.pid] = None if cg is None or n is None else (cg.job_id, n)
        if cg is not None and n is not None:
            steps[cg.job_id] = min(steps.get(cg.job_id, n), n)
    return [st for st in procs if (w := where[st.pid]) is None or steps[w[0]] == w[1]]


def supervisor_procs(node: str, slurm_conf: str | None = None, proc: Path = PROC) -> list[ProcStat]:
    """The node's daemon (and what it started), by its environment. Several test clusters on one machine
    name their nodes alike: with `slurm_conf`, a daemon whose environment names another cluster's is not
    this one's (a daemon that names none, as systemd starts it, still is)."""

    want = None if slurm_conf is None else os.path.realpath(slurm_conf)

    def ours(env: Mapping[str, str]) -> bool:
        named = env.get("SLURM_CONF")
        return env.get(ENV_SUPERVISOR_NODE) == node and (
            want is None or named is None or os.path.realpath(named) == want
        )

    return find_by_env(ours, proc)


def listener_procs(port: int, proc: Path = PROC) -> list[ProcStat]:
    """Processes holding a socket that listens on TCP `port`: e.g. the Lighthouse, wherever it was started, in
    any network namespace (a lab node's is its own: /proc/PID/net shows the sockets of PID's namespace)."""
    inodes: set[str] = set()
    seen: set[str] = set()
    everyone = list(_other_processes(proc))
    for st in [None, *everyone]:
        where = proc / ("self" if st is None else str(st.pid))
        try:
            ns = os.readlink(where / "ns" / "net")
        except OSError:
            continue
        if ns not in seen:
            seen.add(ns)
            inodes |= procfs.listening_inodes(where, port)
    if not inodes:
        return []
    found = [st for st in everyone if procfs.holds_socket(proc, st.pid, inodes)]
    return sorted(found, key=lambda p: p.pid)


def signal_procs(procs: list[ProcStat], sig: signal.Signals, proc: Path = PROC) -> list[int]:
    """Send `sig` to each process that is still the one found (same start time); return the PIDs hit."""
    hit: list[int] = []
    for p in procs:
        st = procfs.read_stat(proc, p.pid)
        if st is None or st.start_time != p.start_time:
            continue
        try:
            os.kill(p.pid, sig)
            hit.append(p.pid)
        except ProcessLookupError:
            continue
    return hit
