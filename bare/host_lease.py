"""A host's liveness in etcd: its key under a lease it keeps alive, and when it must fence itself.

etcd expires the lease `ttl_s` after the last renewal it granted, and the
placer may give the host's groups away only after that. The host counts from
when it *sent* its last renewal that succeeded, which is no later than when
etcd granted it, so a host cut off from etcd that kills its trainers at
`sent + ttl_s - margin_s` has killed them before anyone may start them
elsewhere: two trainers of one group never overlap, whatever the partition.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from lamplighter.bare.etcd_store import EtcdError, Store
from lamplighter.bare.keys import Keys

log = logging.getLogger(__name__)


def fence_at(renewed_at: float, ttl_s: float, margin_s: float) -> float:
    """Pure: when a host that last renewed at `renewed_at` must have killed its trainers."""
    return renewed_at + ttl_s - margin_s


def fence_due(now: float, renewed_at: float | None, ttl_s: float, margin_s: float) -> tuple[bool, str]:
    """Pure: must the host kill its trainers now (its lease may be about to expire), and why."""
    if renewed_at is None:
        return True, "this host never renewed its lease: it may run nothing"
    left = fence_at(renewed_at, ttl_s, margin_s) - now
    if left <= 0:
        return True, (
            f"lease not renewed for {now - renewed_at:.1f} s (ttl {ttl_s:g} s, margin {margin_s:g} s): "
            "its groups may be given to other hosts"
        )
    return False, f"lease good for {left:.1f} s more"


def renew_every(ttl_s: float, margin_s: float) -> float:
    """Pure: how often a host renews its lease. Half the time it has before the fence: a renewal that fails
    leaves as long again for retries (one a cycle). 3 s at the defaults (ttl 8, margin 2): 0.33 requests a
    second, where renewing every 0.5 s cycle made 2."""
    return (ttl_s - margin_s) / 2


def renewal_due(now: float, renewed_at: float | None, ttl_s: float, margin_s: float) -> bool:
    """Pure: is a renewal due (never renewed, or renew_every has passed since the last one)?"""
    return renewed_at is None or now - renewed_at >= renew_every(ttl_s, margin_s)


def renewal_deadline(now: float, renewed_at: float | None, ttl_s: float, margin_s: float) -> tuple[float | None, bool]:
    """Pure: by when a renewal sent at `now` must end, and whether to try it before the fence's kills.

    Before the fence deadline: by it. Past it, etcd may still hold the lease, and a renewal it grants proves
    nobody has this host's groups, so it may run to the expiry. Past the expiry: after the kills, with no
    deadline. Never renewed: no deadline, and nothing runs yet."""
    if renewed_at is None:
        return None, True
    fence, expiry = fence_at(renewed_at, ttl_s, margin_s), renewed_at + ttl_s
    if now < fence:
        return fence, True
    return (expiry, True) if now < expiry else (None, False)


@dataclass
class HostLease:
    store: Store
    keys: Keys
    host: str
    ttl_s: int = 3
    info: dict[str, Any] = field(default_factory=dict)
    lease: int = 0
    renewed_at: float | None = None  # monotonic time the last successful renewal was sent
    error: str | None = None

    def renew(self, now: float) -> bool:
        """Keep the lease (or take a new one and re-register); `now` is when the request goes out."""
        try:
            if self.lease and self.store.keepalive(self.lease) > 0:
                self.renewed_at, self.error = now, None
                return True
            if self.lease:
                log.warning("%s: lease %x had expired: registering again", self.host, self.lease)
            self.lease = self.store.grant(self.ttl_s)
            self.store.put(self.keys.host(self.host), json.dumps(self.info, sort_keys=True), self.lease)
            self.renewed_at, self.error = now, None
            return True
        except EtcdError as e:
            if self.error is None:
                log.error("%s: cannot renew its lease: %s", self.host, e)
            self.error = str(e)
            return False

    def publish(self, **info: Any) -> None:
        """Change what the host's key says (its GPUs' health, for `lamplighter hosts`), under the same lease."""
        self.info.update(info)
        if self.lease:
            try:
                self.store.put(self.keys.host(self.host), json.dumps(self.info, sort_keys=True), self.lease)
            except EtcdError as e:
                log.warning("%s: cannot publish %s: %s", self.host, info, e)

    def fence_due(self, now: float, margin_s: float) -> tuple[bool, str]:
        return fence_due(now, self.renewed_at, self.ttl_s, margin_s)

    def fence_at(self, margin_s: float) -> float | None:
        """When the host must have killed its trainers if no renewal succeeds before; None: never renewed."""
        return None if self.renewed_at is None else fence_at(self.renewed_at, self.ttl_s, margin_s)

    def renewal_due(self, now: float, margin_s: float) -> bool:
        return renewal_due(now, self.renewed_at, self.ttl_s, margin_s)

    def renewal_deadline(self, now: float, margin_s: float) -> tuple[float | None, bool]:
        return renewal_deadline(now, self.renewed_at, self.ttl_s, margin_s)

    def leave(self) -> None:
        """A clean stop: the host's key goes at once instead of after its TTL."""
        if self.lease:
            self.store.revoke(self.lease)
            self.lease, self.renewed_at = 0, None
