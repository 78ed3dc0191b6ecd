"""The one reader of /proc (or of a fake tree shaped like it): stat, environ, cgroup, status, meminfo, sockets.

Every caller passes the proc root, so tests give it a directory in tmp_path
with hand-written files. That is also why this reads files rather than using
psutil: psutil's /proc path is one process-wide setting, not a parameter.
psutil still does what needs no fake root (process_tree.py: killing a live tree).

A process is identified by (pid, start time): the start time (clock ticks
after boot, stat field 22) tells a process from a later one that reused its PID.
Every reader returns None (or skips) where the process is gone, not ours to
read, or half written, never an exception: processes exit between listing and reading.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TCP_LISTEN = "0A"


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    state: str  # R, S, D, Z, T, ...
    ppid: int
    start_time: int  # clock ticks after boot: with pid, identifies a process
    rss_pages: int


def parse_stat(text: str) -> ProcStat:
    """One /proc/PID/stat line. comm may hold spaces and parentheses, so split at the last ')'."""
    head, _, tail = text.rpartition(")")
    pid_s, _, comm = head.partition(" (")
    f = tail.split()
    # After comm: state(3) ppid(4) ... starttime(22) vsize(23) rss(24), numbered from 1.
    return ProcStat(pid=int(pid_s), comm=comm, state=f[0], ppid=int(f[1]), start_time=int(f[19]), rss_pages=int(f[21]))


def parse_environ(raw: bytes) -> dict[str, str]:
    """/proc/PID/environ: the environment the process was exec'd with, NUL-separated."""
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            env[name.decode(errors="replace")] = value.decode(errors="replace")
    return env


def pids(proc_root: Path) -> list[int]:
    """Every PID listed under proc_root (raises OSError if it cannot be listed)."""
    return [int(name) for name in os.listdir(proc_root) if name.isdigit()]


def read_stat(proc_root: Path, pid: int) -> ProcStat | None:
    """The process's stat, or None if it is gone (or unreadable)."""
    try:
        return parse_stat((proc_root / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def read_environ(proc_root: Path, pid: int) -> dict[str, str] | None:
    """The process's exec-time environment, or None if it is gone or not ours to read (ptrace access)."""
    try:
        return parse_environ((proc_root / str(pid) / "environ").read_bytes())
    except OSError:
        return None


# /proc/PID/cgroup is a dozen short lines; a longer one is not Slurm's (and is not read past this).
CGROUP_MAX_BYTES = 16 * 1024


def read_cgroup(proc_root: Path, pid: int) -> str | None:
    """The process's /proc/PID/cgroup text (bounded), or None if it is gone."""
    try:
        with open(proc_root / str(pid) / "cgroup", "rb") as f:
            return f.read(CGROUP_MAX_BYTES).decode(errors="replace")
    except OSError:
        return None


def read_uid(proc_root: Path, pid: int) -> int | None:
    """The process's real uid (/proc/PID/status `Uid:` real, effective, saved, fs), or None if it is gone."""
    try:
        for line in (proc_root / str(pid) / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def same_process(proc_root: Path, pid: int, start_time: int) -> bool:
    """Is (pid, start_time) still a live process (not exited, not a zombie, not a reused PID)? Check before signalling."""
    st = read_stat(proc_root, pid)
    return st is not None and st.start_time == start_time and st.state != "Z"


def ns_pid(proc_root: Path, pid: int) -> int:
    """The innermost PID from /proc/PID/status NSpid (containers, and each test-cluster node, have their own)."""
    try:
        for line in (proc_root / str(pid) / "status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return pid


def boot_time(proc_root: Path) -> float:
    """Epoch seconds of the boot (btime in /proc/stat): start times count clock ticks from it."""
    for line in (proc_root / "stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError(f"no btime in {proc_root / 'stat'}")


def snapshot(proc_root: Path) -> dict[int, ProcStat]:
    """Every process visible under proc_root."""
    out: dict[int, ProcStat] = {}
    try:
        listed = pids(proc_root)
    except OSError:
        return out
    for pid in listed:
        st = read_stat(proc_root, pid)
        if st is not None:
            out[st.pid] = st
    return out


def tree(snap: dict[int, ProcStat], root: int) -> list[ProcStat]:
    """The root process and all its descendants in the snapshot (root first)."""
    children: dict[int, list[int]] = {}
    for st in snap.values():
        children.setdefault(st.ppid, []).append(st.pid)
    out: list[ProcStat] = []
    todo = [root]
    seen: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in snap:
            continue
        seen.add(pid)
        out.append(snap[pid])
        todo.extend(children.get(pid, []))
    return out


def mem_total_bytes(proc_root: Path) -> int | None:
    """MemTotal from meminfo, or None if it cannot be read."""
    try:
        for line in (proc_root / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def listening_inodes(proc_root: Path, port: int) -> set[str]:
    """Socket inodes listening on TCP `port` (IPv4 or IPv6), from /proc/net/tcp{,6}."""
    out: set[str] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc_root / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == _TCP_LISTEN and int(f[1].rsplit(":", 1)[1], 16) == port:
                out.add(f[9])
    return out


def holds_socket(proc_root: Path, pid: int, inodes: set[str]) -> bool:
    """Does the process have one of these socket inodes open (/proc/PID/fd links)? False if we may not look."""
    want = {f"socket:[{i}]" for i in inodes}
    try:
        fds = list((proc_root / str(pid) / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) in want:
                return True
        except OSError:
            continue
    return False


def read_cmdline(proc_root: Path, pid: int) -> list[bytes] | None:
    """The process's argv (/proc/PID/cmdline, NUL-separated), or None if it is gone."""
    try:
        return (proc_root / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None


def children(proc_root: Path, pid: int) -> list[int]:
    """The direct children of every thread of the process (/proc/PID/task/*/children)."""
    out: list[int] = []
    for task in (proc_root / str(pid) / "task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out
