"""The placer role: whichever host daemon wins the election reads the cluster from etcd and moves groups.

Election: the placer key is created only if absent, under the candidate's
lease, so there is at most one placer and, when it dies or is cut off, the key
goes with its lease and any daemon's next campaign takes the role (within the
lease's TTL). Every write of a placement is one transaction that holds only if
this daemon is still the placer and the group's key is unchanged since it was
read: a deposed placer, or two placers in the instant of a handover, cannot
write over each other (the write is refused and said).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from lamplighter.bare.etcd_store import Entry, Store, absent, created_at, delete_prefix, mod_revision_is, put, value_is
from lamplighter.bare.keys import Keys
from lamplighter.bare.placement import Assignment, HostView, Move, place

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostEntry:
    name: str
    spare: bool = False


@dataclass(frozen=True)
class ClusterView:
    """One consistent read of everything placement needs (one etcd revision)."""

    revision: int
    hosts: list[HostView]
    assigned: dict[int, Assignment]
    key_revisions: dict[int, int]  # group -> its key's mod revision (0: no key yet)
    failed_on: dict[int, str]
    spec_created: int  # the job's spec key's create revision (0: the job is not there, or was cancelled)


@dataclass
class Placer:
    store: Store
    keys: Keys
    me: str
    ttl_s: int = 3
    lease: int = 0
    leading: bool = False
    refused: list[Move] = field(default_factory=list)

    def campaign(self) -> str | None:
        """Keep our lease, try for the role; the placer's name now (None: nobody holds it)."""
        if not self.lease or self.store.keepalive(self.lease) <= 0:
            self.lease = self.store.grant(self.ttl_s)
        self.store.txn(
            f"{self.me} campaigns for placer", [absent(self.keys.placer)], [put(self.keys.placer, self.me, self.lease)]
        )
        now = self.store.get(self.keys.placer)
        was = self.leading
        self.leading = now is not None and now.value == self.me and now.lease == self.lease
        if self.leading and not was:
            log.warning("%s: now the placer", self.me)
        elif was and not self.leading:
            log.warning("%s: no longer the placer (now %s)", self.me, now.value if now else "nobody")
        return now.value if now else None

    def keep(self) -> bool:
        """Renew the placer's lease (its key lives as long): whether it still holds the role. One request,
        where a campaign makes three."""
        if not self.lease or self.store.keepalive(self.lease) <= 0:
            if self.leading:
                log.warning("%s: no longer the placer (its lease expired)", self.me)
            self.leading = False
        return self.leading

    def forget(self, job: str) -> bool:
        """Delete what the cluster keeps about a job no spec names any more (cancelled), if we are the placer:
        whether it did. A job of that name submitted meanwhile is placed afresh."""
        if not self.leading:
            return False
        return self.store.txn(
            f"{self.me} forgets cancelled job {job}",
            [value_is(self.keys.placer, self.me)],
            [delete_prefix(self.keys.job(job))],
        )

    def resign(self) -> None:
        if self.lease:
            self.store.revoke(self.lease)
        self.lease, self.leading = 0, False

    def read(
        self, job: str, spec_key: str, hosts: Sequence[HostEntry], seen: tuple[int, list[Entry]] | None = None
    ) -> ClusterView:
        """The job's view, from `seen` (a read of the whole prefix the caller made) or a read of its own."""
        rev, entries = seen if seen is not None else self.store.prefix(self.keys.root)
        by_key = {e.key: e for e in entries}
        views = []
        for h in hosts:
            out = by_key.get(self.keys.out(h.name))
            reason = json.loads(out.value).get("reason", "taken out") if out else None
            views.append(HostView(h.name, self.keys.host(h.name) in by_key, reason, h.spare))
        assigned: dict[int, Assignment] = {}
        revisions: dict[int, int] = {}
        reports: dict[int, dict[str, object]] = {}
        for e in entries:
            if e.key.startswith(self.keys.groups(job)):
                g = int(Keys.last(e.key))
                assigned[g], revisions[g] = Assignment.from_json(e.value), e.mod_revision
            elif e.key.startswith(self.keys.failures(job)):
                reports[int(Keys.last(e.key))] = json.loads(e.value)
        # Only a failure under the group's current epoch counts: an older one was acted on already.
        failed = {
            g: str(d["host"])
            for g, d in reports.items()
            if g in assigned and d.get("epoch") == assigned[g].epoch and d.get("host") == assigned[g].host
        }
        spec = by_key.get(spec_key)
        return ClusterView(rev, views, assigned, revisions, failed, spec.create_revision if spec else 0)

    def step(
        self,
        job: str,
        spec_key: str,
        groups: int,
        hosts: Sequence[HostEntry],
        seen: tuple[int, list[Entry]] | None = None,
    ) -> list[Move]:
        """One placement round, if we are the placer: the moves written (refused ones are kept in `refused`).

        spec_key: the job's spec (keys.spec(user, job)); a move holds only while that very spec is there.
        seen: the caller's read of the prefix; a move placed on an old one is refused by its transaction."""
        if not self.leading:
            return []
        view = self.read(job, spec_key, hosts, seen)
        if not view.spec_created:
            return []  # cancelled (or never submitted): nothing to place
        done = []
        for m in place(groups, view.assigned, view.hosts, view.failed_on):
            key = self.keys.group(job, m.group)
            ok = self.store.txn(
                f"{self.me} moves group {m.group} of {job}",
                # Still the placer, the group unchanged since read, and the job not cancelled meanwhile.
                [
                    value_is(self.keys.placer, self.me),
                    mod_revision_is(key, view.key_revisions.get(m.group, 0)),
                    created_at(spec_key, view.spec_created),
                ],
                [put(key, m.new.to_json())],
            )
            if ok:
                log.warning("placer %s: %s group %s epoch %s: %s", self.me, job, m.group, m.new.epoch, m.new.reason)
                done.append(m)
            else:
                log.warning(
                    "placer %s: move of %s group %s refused (no longer placer, or changed)", self.me, job, m.group
                )
                self.refused.append(m)
        return done
