"""Finding the processes chaos may hit: by their environment or by the port they listen on, never by name.

On the test cluster every node is this machine and each node's processes sit
in their own PID namespace; from the root namespace /proc shows them all with
their real PIDs. A process is identified by (pid, start time) so a signal
never reaches a process that reused a PID.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lamplighter.supervisor.discovery import parse_environ, parse_stat
from lamplighter.trainer.contract import ENV_JOB, ENV_REPLICA_ID

PROC = Path("/proc")
# Set only by the task wrapper of a rendered group script (and by local mode's launcher) in the
# trainer's own environment: the batch shell and srun carry LAMPLIGHTER_JOB too, but not RANK.
TRAINER_MARK = "RANK"
# The e2e harness and the demo start each node daemon with this set to the node's name.
ENV_SUPERVISOR_NODE = "LAMPLIGHTER_SUPERVISOR_NODE"
_TCP_LISTEN = "0A"


@dataclass(frozen=True)
class Proc:
    pid: int
    start_time: int
    state: str


def _env_of(pid: int, proc: Path) -> dict[str, str] | None:
    try:
        return parse_environ((proc / str(pid) / "environ").read_bytes())
    except OSError:
        return None


def find_by_env(match: Callable[[Mapping[str, str]], bool], proc: Path = PROC) -> list[Proc]:
    """Live (not zombie) processes whose exec-time environment satisfies `match`."""
    out: list[Proc] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        try:
            st = parse_stat((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
        if st.state in ("Z", "X"):
            continue
        env = _env_of(pid, proc)
        if env is not None and match(env):
            out.append(Proc(pid, st.start_time, st.state))
    return sorted(out, key=lambda p: p.pid)


def trainer_procs(job: str, replica_id: int, proc: Path = PROC) -> list[Proc]:
    """The trainer processes of one replica group (all its ranks, on every node)."""
    rid = str(replica_id)
    return find_by_env(lambda e: e.get(ENV_JOB) == job and e.get(ENV_REPLICA_ID) == rid and TRAINER_MARK in e, proc)


def supervisor_procs(node: str, proc: Path = PROC) -> list[Proc]:
    return find_by_env(lambda e: e.get(ENV_SUPERVISOR_NODE) == node, proc)


def listening_inodes(port: int, proc: Path = PROC) -> set[str]:
    """Socket inodes listening on TCP `port` (IPv4 or IPv6), from /proc/net/tcp{,6}."""
    out: set[str] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == _TCP_LISTEN and int(f[1].rsplit(":", 1)[1], 16) == port:
                out.add(f[9])
    return out


def listener_procs(port: int, proc: Path = PROC) -> list[Proc]:
    """Processes holding a socket that listens on TCP `port`: e.g. the Lighthouse, wherever it was started."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return []
    want = {f"socket:[{i}]" for i in inodes}
    out: list[Proc] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fds = list((entry / "fd").iterdir())
            st = parse_stat((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in want:
                    out.append(Proc(int(entry.name), st.start_time, st.state))
                    break
            except OSError:
                continue
    return sorted(out, key=lambda p: p.pid)


def signal_procs(procs: list[Proc], sig: signal.Signals, proc: Path = PROC) -> list[int]:
    """Send `sig` to each process that is still the one found (same start time); return the PIDs hit."""
    hit: list[int] = []
    for p in procs:
        try:
            st = parse_stat((proc / str(p.pid) / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
        if st.start_time != p.start_time:
            continue
        try:
            os.kill(p.pid, sig)
            hit.append(p.pid)
        except ProcessLookupError:
            continue
    return hit
