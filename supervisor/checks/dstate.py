"""D-state check: a process of a trainer's tree in uninterruptible sleep for too long.

A short D state is normal (disk, NFS, a GPU driver call); only a long one means
the process cannot even be killed cleanly. The check remembers since when each
process (pid + start time) has been in D.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lamplighter.policy.observations import DState
from lamplighter.system.procfs import ProcStat, snapshot, tree
from lamplighter.system.trainer_proc import ProcessTable


class DStateCheck:
    def __init__(
        self,
        table: ProcessTable,
        limit_s: float,
        proc_root: Path = Path("/proc"),
        read_snapshot: Callable[[], dict[int, ProcStat]] | None = None,
    ) -> None:
        self._table = table
        self._limit = limit_s
        self._root = proc_root
        # Several checks (one per job on a node) may share one read of /proc per cycle.
        self._snapshot = read_snapshot or (lambda: snapshot(proc_root))
        self._since: dict[tuple[int, int], float] = {}

    def observe(self, now: float) -> list[DState]:
        snap = self._snapshot()
        out: list[DState] = []
        still: dict[tuple[int, int], float] = {}
        for p in self._table.trainers():
            for st in tree(snap, p.pid):
                if st.state != "D":
                    continue
                key = (st.pid, st.start_time)
                since = still[key] = self._since.get(key, now)
                if now - since >= self._limit:
                    out.append(
                        DState(
                            group=p.group,
                            rank=p.rank,
                            attempt=p.attempt,
                            pid=st.pid,
                            stuck_s=now - since,
                            limit_s=self._limit,
                        )
                    )
        self._since = still
        return out
