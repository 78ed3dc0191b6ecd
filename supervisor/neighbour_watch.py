"""Node daemons watch each other's slurmd for the head, so that the head's cycle does not grow with the cluster.

The head moves groups off a node whose slurmd went silent (head/loop.py). Probing
every node itself each cycle costs it about 0.2 ms a node here: 2 s a cycle at
10,000 nodes. Instead, the head publishes the ring of the nodes it watches
(`slurm-ring.json` in cluster_status_dir, rewritten only when it changes); each
compute daemon probes two of them (the one before it in name order, and the one
half the ring away, which is unlikely to share its rack) and, while one is
silent, writes `suspects/<itself>.json` naming it. Each cycle the head lists
that folder (empty while all is well), and probes only what is named there,
the nodes it already holds silent or drained for silence, and `head_probe_sweep`
nodes in turn, so that a node whose two watchers died with it is still found.

A report only tells the head where to look: the head drains or marks down
only on its own probe's silence. Every file here is root's, read only if it is
a regular file of root's, and bounded.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lamplighter.rundir.contract import write_json_atomic
from lamplighter.rundir.owned_file import MIB, OwnedFileError, read_owned
from lamplighter.system.ports import answering

log = logging.getLogger(__name__)

RING_FILE = "slurm-ring.json"  # no "node" key: no node report reader takes it
SUSPECTS_DIR = "suspects"  # a folder of its own: listing it costs what it holds, not the cluster's size
MAX_RING_BYTES = 16 * MIB  # about 40 bytes a node
MAX_REPORT_BYTES = 64 * 1024
MAX_REPORTS = 1024  # read per cycle at most: a flood of reports cannot stall the head
REPORT_REFRESH_S = 5.0  # a report still naming a node is rewritten this often...
REPORT_MAX_AGE_S = 15.0  # ...and one older than this is a dead reporter's: ignored
NEIGHBOUR_TIMEOUT_S = 0.25  # short: a suspicion is cheap, the head's own probe decides
FILE_MODE = 0o644

Addr = tuple[str, int]


def watched_by(me: str, names: Collection[str]) -> list[str]:
    """Pure: the nodes `me` watches: the one before it in name order and the one half the ring away (one of
    them when there are two nodes, none when `me` is alone or not in the ring)."""
    ring = sorted(names)
    if me not in ring or len(ring) < 2:
        return []
    i, n = ring.index(me), len(ring)
    out = [ring[(i - 1) % n]]
    far = ring[(i + n // 2) % n]
    if far != me and far not in out:
        out.append(far)
    return out


def sweep(names: list[str], cursor: int, size: int) -> tuple[list[str], int]:
    """Pure: the next `size` of the sorted `names` from `cursor` on, wrapping, and the cursor after them;
    all of them when `size` is 0 or covers them."""
    n = len(names)
    if size <= 0 or size >= n:
        return list(names), 0
    start = cursor % n
    return [names[(start + i) % n] for i in range(size)], (start + size) % n  # not a copy of the ring: size only


def publish_ring(folder: Path, head: str, where: Mapping[str, Addr]) -> None:
    doc = {"ring": "lamplighter slurmd watch", "head": head, "nodes": {n: list(a) for n, a in sorted(where.items())}}
    write_json_atomic(folder / RING_FILE, doc, mode=FILE_MODE)


def read_suspects(folder: Path, now: float, owner: int = 0) -> dict[str, set[str]]:
    """Head: node -> who reports it silent, from the fresh reports of root's in `<folder>/suspects`."""
    out: dict[str, set[str]] = {}
    try:
        entries = sorted(os.scandir(folder / SUSPECTS_DIR), key=lambda e: e.name)[:MAX_REPORTS]
    except OSError:
        return out
    for entry in entries:
        if not entry.name.endswith(".json"):
            continue
        try:
            doc = json.loads(read_owned(entry.path, owner=owner, max_bytes=MAX_REPORT_BYTES))
            age = now - float(doc["written_at"])
            reporter, silent = str(doc["reporter"]), doc["silent"]
        except (OwnedFileError, OSError, ValueError, KeyError, TypeError):
            continue
        if not -REPORT_MAX_AGE_S < age <= REPORT_MAX_AGE_S or not isinstance(silent, dict):
            continue
        for node in silent:
            out.setdefault(str(node), set()).add(reporter)
    return out


@dataclass
class NeighbourWatch:
    """A compute daemon's part: probe the nodes the ring gives it, report the silent ones to the head."""

    folder: Path
    node: str
    owner: int = 0  # the head daemon's uid: root
    clock: Callable[[], float] = time.time
    probe: Callable[[Iterable[Addr], float], set[Addr]] = answering
    silent: dict[str, float] = field(default_factory=dict)  # watched node -> since when it does not answer
    _ring: dict[str, Addr] = field(default_factory=dict)
    _mine: dict[str, Addr] = field(default_factory=dict)  # the two it watches: chosen when the ring changes
    _ring_stat: tuple[int, int, int] | None = None
    _written_at: float | None = None  # the report on disk, if any

    def cycle(self) -> None:
        now = self.clock()
        self._reload_ring()
        mine = self._mine
        heard = self.probe(list(mine.values()), NEIGHBOUR_TIMEOUT_S) if mine else set()
        before = set(self.silent)
        self.silent = {n: self.silent.get(n, now) for n, a in mine.items() if a not in heard}
        if set(self.silent) != before or (
            self.silent and (self._written_at is None or now - self._written_at >= REPORT_REFRESH_S)
        ):
            self._report(now)

    def address_of(self, node: str) -> str | None:
        """The node's slurmd address (NodeAddr) as the head's ring gives it, if the ring holds the node."""
        have = self._ring.get(node)
        return None if have is None else have[0]

    def _reload_ring(self) -> None:
        """Read the ring again only when its file changed (a stat a cycle, on a shared folder)."""
        path = self.folder / RING_FILE
        try:
            st = path.stat()
        except OSError:
            self._ring, self._mine, self._ring_stat = {}, {}, None
            return
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key == self._ring_stat:
            return
        try:
            nodes = json.loads(read_owned(path, owner=self.owner, max_bytes=MAX_RING_BYTES))["nodes"]
            self._ring = {str(n): (str(a[0]), int(a[1])) for n, a in nodes.items()}
        except (OwnedFileError, OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            log.warning("cannot read the head's ring %s: %s", path, e)
            self._ring = {}
        self._mine = {n: self._ring[n] for n in watched_by(self.node, self._ring)}
        self._ring_stat = key

    def _report(self, now: float) -> None:
        path = self.folder / SUSPECTS_DIR / f"{self.node}.json"
        try:
            if not self.silent:
                path.unlink(missing_ok=True)
                self._written_at = None
                return
            path.parent.mkdir(mode=0o755, exist_ok=True)
            doc = {"reporter": self.node, "written_at": now, "silent": self.silent}
            write_json_atomic(path, doc, mode=FILE_MODE)
            self._written_at = now
        except OSError as e:
            log.warning("cannot report silent neighbours %s to the head in %s: %s", sorted(self.silent), path, e)

    def close(self) -> None:
        """A daemon that stops takes its report back: it no longer vouches for it."""
        self.silent = {}
        self._report(self.clock())
