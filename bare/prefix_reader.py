"""The cluster's prefix in etcd, read only when it may have changed: the part of a host daemon that reads.

The read is the one source of truth (consistent at one revision); its watch (prefix_watch.py) only says
when to read again, as does any answer of the store showing a newer revision (a stalled watch, this
host's own writes). A watch that lasted is opened again at once; one that keeps failing, once per
`every_s` (the lease's renewal interval), so a member that keeps ending watches costs a read a cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from lamplighter.bare.etcd_store import Entry, EtcdError, Store
from lamplighter.bare.prefix_watch import PrefixWatch

log = logging.getLogger(__name__)


@dataclass
class PrefixReader:
    store: Store
    prefix: str
    every_s: float
    clock: Callable[[], float]
    who: str = ""  # for the log
    seen: tuple[int, list[Entry]] | None = None  # the last read: (revision, entries)
    watch: PrefixWatch | None = None  # says when to read again
    _watch_opened_at: float | None = None

    def due(self) -> bool:
        """Whether the prefix may have changed since the last read: the watch saw it change (or is down), or
        an answer showed a newer revision of the store."""
        w = self.watch
        if self.seen is None or w is None or not w.alive:
            return True
        return max(w.newest, self.store.seen_revision) > self.seen[0]

    def read(self) -> tuple[int, list[Entry]] | None:
        """Read the prefix now (and keep a watch open from that read); None when etcd cannot be read (the last
        read is forgotten: read again next cycle, whatever the watch says)."""
        try:
            rev, entries = self.store.prefix(self.prefix)
        except EtcdError as e:
            log.warning("%s: cannot read the assignments (keeping the last ones): %s", self.who, e)
            self.seen = None
            return None
        self.seen, now, w = (rev, entries), self.clock(), self.watch
        # On etcd 3.4 one client closing its watch can end the others' on that member: each host then pays
        # one read, not a read a cycle.
        lasted = w is not None and (w.lived_s or 0) >= self.every_s
        if w is None or (not w.alive and (lasted or now - (self._watch_opened_at or 0) >= self.every_s)):
            self._watch_opened_at = now
            self.watch = self.store.watch(self.prefix, rev)  # events after this read
        return self.seen

    def forget(self) -> None:
        """Read again next cycle (what was read is stale for its caller)."""
        self.seen = None

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
