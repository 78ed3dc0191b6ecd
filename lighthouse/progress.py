"""Progress of every replica group as torchft's Lighthouse sees it: works for any torchft trainer.

Every torchft Manager asks the Lighthouse for a quorum at each step and tells
it its step; `/status` lists the last quorum's members with their step. A
replica's full id is "<name>:<uuid4>", a new uuid on every start, so one
process is one full id. A process makes progress when its step changes from
one read to the next. Joining a quorum is not progress yet: a restarted group
joins, then receives the weights from a peer and only then commits, and that
heal is part of its start (startup_timeout_s), not of a step (hang_timeout_s).
A group's attempt has made progress when one of its own processes did: one
first listed after the attempt started. A process of the attempt before can
still be listed, and its last step change can still be read, after the
restart (the page lags the quorum by a poll); counting it made a restarted
group that was still healing look hung after `hang_timeout_s`.

The group of a replica is the number its name ends with: "3" (lamplighter's
reference trainer), "torchtitan_ft_3" (torchtitan), "my_job_group3". Each job
has its own Lighthouse (docs/torchft.md, "One Lighthouse per job"), so every replica on
it belongs to the job.

While the page cannot be read the check cannot see: silence up to the first
good read (at start, and after an outage) is excused, and the error is kept
for the status display. Nothing here reads the clock; `refresh(now)` is given the time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from lamplighter.lighthouse.status import LighthouseStatus, LighthouseStatusError, LighthouseStatusUnreadable
from lamplighter.rundir.heartbeats import Progress

_TRAILING_NUMBER = re.compile(r"(\d+)$")
FORGET_AFTER_S = 3600.0  # a process not listed for this long is gone: forget it


def group_of(replica_id: str) -> int | None:
    """The replica group a Lighthouse replica id belongs to: the number its name (before ':uuid') ends with."""
    m = _TRAILING_NUMBER.search(replica_id.split(":", 1)[0])
    return int(m.group(1)) if m else None


@dataclass
class _Replica:
    group: int
    step: int
    t_changed: float | None  # when its step last changed (None: not since it was first seen)
    t_seen: float
    t_first_seen: float


class LighthouseProgress:
    name = "lighthouse"

    def __init__(self, fetch: Callable[[], LighthouseStatus]) -> None:
        self._fetch = fetch
        self._replicas: dict[str, _Replica] = {}
        self._blind_until = 0.0  # first good read, at start or after an outage
        self._blind = True  # nothing read yet
        self.error: str | None = None
        self.unreadable = False  # the error is a page the parser does not know, not a Lighthouse away
        self.last: LighthouseStatus | None = None
        self.polled_at: float | None = None

    def refresh(self, now: float) -> None:
        self.polled_at = now
        try:
            status = self._fetch()
        except LighthouseStatusError as e:
            self.error = str(e)
            self.unreadable = isinstance(e, LighthouseStatusUnreadable)
            self._blind = True
            return
        if self._blind:
            self._blind, self._blind_until = False, now
        self.error = None
        self.unreadable = False
        self.last = status
        for m in status.members:
            g = group_of(m.replica_id)
            if g is None:
                continue
            r = self._replicas.get(m.replica_id)
            if r is None:
                self._replicas[m.replica_id] = _Replica(g, m.step, None, now, now)
            else:
                if m.step != r.step:
                    r.step, r.t_changed = m.step, now
                r.t_seen = now
        for rid in [rid for rid, r in self._replicas.items() if now - r.t_seen > FORGET_AFTER_S]:
            del self._replicas[rid]

    def excused_until(self, now: float) -> float:
        return now if self._blind else self._blind_until

    def job_progress(self) -> tuple[set[int], float | None]:
        changed = [r for r in self._replicas.values() if r.t_changed is not None]
        return {r.group for r in changed}, max((r.t_changed for r in changed if r.t_changed is not None), default=None)

    def last_progress(self, group: int, attempt: int, started_at: float) -> Progress | None:
        mine = [
            (r.t_changed, r)
            for r in self._replicas.values()
            if r.group == group and r.t_changed is not None and r.t_first_seen >= started_at
        ]
        if not mine:
            return None
        t, latest = max(mine, key=lambda tr: tr[0])
        return Progress(t=t, step=latest.step, source=self.name)

    def steps(self) -> dict[int, int]:
        """Each group's highest step in the last quorum (for the live view and the report)."""
        out: dict[int, int] = {}
        for m in self.last.members if self.last else []:
            g = group_of(m.replica_id)
            if g is not None:
                out[g] = max(out.get(g, -1), m.step)
        return out
