"""Reading /proc (or a fake tree shaped like it): process state, parent, start time, memory.

Checks take the proc root as a parameter so tests can give them a directory
in tmp_path with hand-written stat files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    state: str  # R, S, D, Z, T, ...
    ppid: int
    starttime: int  # clock ticks after boot: with pid, identifies a process
    rss_pages: int


def parse_stat(text: str) -> ProcStat:
    """One /proc/PID/stat line. comm may hold spaces and parentheses, so split at the last ')'."""
    head, _, tail = text.rpartition(")")
    pid_s, _, comm = head.partition(" (")
    f = tail.split()
    # After comm: state(3) ppid(4) ... starttime(22) vsize(23) rss(24), numbered from 1.
    return ProcStat(pid=int(pid_s), comm=comm, state=f[0], ppid=int(f[1]), starttime=int(f[19]), rss_pages=int(f[21]))


def read_stat(proc_root: Path, pid: int) -> ProcStat | None:
    """The process's stat, or None if it is gone (or unreadable)."""
    try:
        return parse_stat((proc_root / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def snapshot(proc_root: Path) -> dict[int, ProcStat]:
    """Every process visible under proc_root."""
    out: dict[int, ProcStat] = {}
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return out
    for name in entries:
        if name.isdigit():
            st = read_stat(proc_root, int(name))
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
