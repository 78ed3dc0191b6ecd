"""Each job's Lighthouse reads, off the daemon's cycle, and only from where the job's own Lighthouse runs.

The address a job's progress is read from comes from the job (its
lighthouse.json, its config): the job's own word, which may steer only that
job. The daemon reads it only on the node where Slurm runs that job's
Lighthouse job (`<job_prefix><job>-lighthouse`, RUNNING, of the same user):
the address's host must be that node's name, its NodeAddr or NodeHostname,
or resolve to one of their addresses. Anything else is refused before any
connection, with the reason, so a job cannot make root probe the network for
it. The place is read once a minute per job from the head's job table and
ring (root's files in cluster_status_dir), and asked of Slurm only when
they cannot say.

The cycle never waits: every job has at most one read in flight, started at
most every READ_EVERY_S, in a thread of its own (the place, the name resolution and the bounded HTTP read of
lighthouse.status.fetch_status), and the cycle takes the latest answer. A
read that has not answered yet, or failed, is an error the progress check
treats as a Lighthouse it cannot see (its silence excused), as before.
"""

from __future__ import annotations

import logging
import pwd
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

from lamplighter.configs.slurm_names import lighthouse_job_name
from lamplighter.lighthouse.status import LighthouseStatus, LighthouseStatusError
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.parsers import JobInfo
from lamplighter.slurm.run import SlurmError

log = logging.getLogger(__name__)

Fetch = Callable[[str, float], LighthouseStatus]
PLACE_TTL_S = 60.0
# A read of the whole status page (every member of the job) costs the daemon and the Lighthouse in proportion to
# the job's groups: every 2 s, not every cycle (make scale: a compute daemon's CPU grew 0.006 -> 0.024 cores from
# 4 to 64 groups at a read every 0.5-s cycle). A hang is then seen at most 2 s later, against hang timeouts of 10 s
# and more.
READ_EVERY_S = 2.0


@dataclass(frozen=True)
class Place:
    """Where a job's Lighthouse runs: the node, and the names and addresses it answers to."""

    node: str
    names: frozenset[str]
    addresses: frozenset[str]


def resolve(names: set[str]) -> frozenset[str]:
    out: set[str] = set()
    for name in names:
        try:
            out |= {str(ai[4][0]) for ai in socket.getaddrinfo(name, None)}
        except OSError:
            continue
    return frozenset(out)


def lighthouse_place(api: SlurmApi, prefix: str, job: str, uid: int) -> Place:
    """The node of the job's own RUNNING Lighthouse job of user `uid` (LighthouseStatusError: why there is none)."""
    name = lighthouse_job_name(job, prefix)
    try:
        entries = [e for e in api.jobs(name) if e.name == name and e.state == "RUNNING" and e.nodes]
    except SlurmError as e:
        raise LighthouseStatusError(f"cannot ask Slurm where {name} runs: {e}") from e
    for entry in entries:
        try:
            owner = pwd.getpwnam(entry.user).pw_uid
        except KeyError:
            owner = int(entry.user) if entry.user.isdigit() else -1
        if owner != uid:
            continue
        node = expand_hostlist(entry.nodes or "")[0]
        try:
            info = api.node(node)
        except SlurmError as err:
            raise LighthouseStatusError(f"cannot ask Slurm about node {node} of {name}: {err}") from err
        names = {node, info.fields.get("NodeAddr") or node, info.fields.get("NodeHostname") or node}
        return Place(node, frozenset(names), resolve(names))
    raise LighthouseStatusError(f"no running Lighthouse job {name} of uid {uid}")


def table_place(
    named: Callable[[str], list[JobInfo] | None],
    address_of: Callable[[str], str | None],
    prefix: str,
    job: str,
    uid: int,
) -> Place | None:
    """The node of the job's own RUNNING Lighthouse job of user `uid` from the head's job table (`named`:
    JobTable.named; as good as Slurm's answer when the head asked), its address from the head's ring; None
    when they cannot say (no fresh table, no such job in it, a node the ring lacks): then Slurm is asked.
    Asked of Slurm by every node daemon once a minute, the place cost 4 RPCs per node a minute (make scale:
    2.4 a second at 64 nodes, 67 projected at 1,000)."""
    jobs = named(lighthouse_job_name(job, prefix))
    for info in jobs or []:
        if info.state != "RUNNING" or not info.node_list or info.user_id != uid:
            continue
        node = expand_hostlist(info.node_list)[0]
        address = address_of(node)
        if address is None:
            return None
        names = {node, address}
        return Place(node, frozenset(names), resolve(names))
    return None


def check_address(address: str, place: Place) -> None:
    """LighthouseStatusError unless the address's host is the place's node."""
    host = urllib.parse.urlsplit(address).hostname or ""
    if host in place.names or (host and resolve({host}) & place.addresses):
        return
    raise LighthouseStatusError(
        f"not reading {address}: {host or 'no host'} is not node {place.node}, where the job's Lighthouse runs"
    )


@dataclass
class _Job:
    thread: threading.Thread | None = None
    started: float = 0.0
    done: LighthouseStatus | LighthouseStatusError | None = None  # the finished read's outcome, not handed out
    last: LighthouseStatus | LighthouseStatusError | None = None
    place: Place | None = None
    place_at: float = -PLACE_TTL_S


@dataclass
class LighthouseReads:
    fetch: Fetch
    where: Callable[[str, int], Place]  # (job, uid) -> its Lighthouse's place (lighthouse_place)
    fetch_as: Callable[[int], Fetch] | None = None  # uid -> its fetch (the user's own reader): then not `fetch`
    clock: Callable[[], float] = time.monotonic
    every_s: float = READ_EVERY_S  # a job's reads start at most this often
    _jobs: dict[tuple[str, int], _Job] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reader(self, job: str, uid: int) -> Fetch:
        """The job's fetch: what its JobWatch calls every cycle."""
        return lambda address, timeout: self.read((job, uid), address, timeout)

    def read(self, key: tuple[str, int], address: str, timeout: float) -> LighthouseStatus:
        now = self.clock()
        with self._lock:
            r = self._jobs.setdefault(key, _Job())
            if r.done is not None:
                r.last, r.done = r.done, None
            idle = r.thread is None or not r.thread.is_alive()
            if idle and (r.thread is None or now - r.started >= self.every_s):
                r.thread = threading.Thread(
                    target=self._work, args=(key, r, address, timeout), name="lighthouse-read", daemon=True
                )
                r.started = now
                r.thread.start()
            elif not idle and now - r.started > 2 * timeout + 5.0:  # its own deadline should have ended it long ago
                raise LighthouseStatusError(f"no answer from {address} within {now - r.started:.1f} s")
            last = r.last
        if last is None:
            raise LighthouseStatusError(f"the first read of {address} is under way")
        if isinstance(last, LighthouseStatusError):
            raise last
        return last

    def _work(self, key: tuple[str, int], r: _Job, address: str, timeout: float) -> None:
        out: LighthouseStatus | LighthouseStatusError
        try:
            if r.place is None or self.clock() - r.place_at > PLACE_TTL_S:
                r.place, r.place_at = None, self.clock()
                r.place = self.where(*key)
            check_address(address, r.place)
            out = (self.fetch if self.fetch_as is None else self.fetch_as(key[1]))(address, timeout)
        except LighthouseStatusError as e:
            out = e
        except Exception as e:  # a read must never take the daemon's thread down: it is an unreadable Lighthouse
            out = LighthouseStatusError(f"cannot read {address}: {type(e).__name__}: {e}")
        with self._lock:
            r.done = out

    def forget(self, keep: set[tuple[str, int]]) -> None:
        with self._lock:
            for key in [k for k in self._jobs if k not in keep]:
                del self._jobs[key]
