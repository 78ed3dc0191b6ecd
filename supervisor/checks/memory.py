"""Memory check: a trainer's process tree holding more than a share of the node's memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lamplighter.policy.observations import MemoryHigh
from lamplighter.system.procfs import PAGE_SIZE, ProcStat, mem_total_bytes, snapshot, tree
from lamplighter.system.trainer_proc import ProcessTable


class MemoryCheckError(RuntimeError):
    """The check could not run (no MemTotal): never reported as a pass."""


class MemoryCheck:
    def __init__(
        self,
        table: ProcessTable,
        max_percent: float,
        proc_root: Path = Path("/proc"),
        page_size: int = PAGE_SIZE,
        read_snapshot: Callable[[], dict[int, ProcStat]] | None = None,
    ) -> None:
        self._table = table
        self._max = max_percent
        self._root = proc_root
        self._page = page_size
        # Several checks (one per job on a node) may share one read of /proc per cycle.
        self._snapshot = read_snapshot or (lambda: snapshot(proc_root))

    def observe(self, now: float) -> list[MemoryHigh]:
        total = mem_total_bytes(self._root)
        if not total:
            raise MemoryCheckError(f"memory check: cannot read MemTotal from {self._root / 'meminfo'}")
        snap = self._snapshot()
        out: list[MemoryHigh] = []
        for p in self._table.trainers():
            rss = sum(st.rss_pages for st in tree(snap, p.pid)) * self._page
            pct = 100.0 * rss / total
            if pct > self._max:
                out.append(
                    MemoryHigh(
                        group=p.group,
                        rank=p.rank,
                        attempt=p.attempt,
                        pid=p.pid,
                        rss_bytes=rss,
                        percent=pct,
                        limit_percent=self._max,
                    )
                )
        return out
