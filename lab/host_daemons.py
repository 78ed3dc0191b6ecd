"""Host daemons run inside a lab's own process (the bare-metal tests, the etcd scale bench).

They share this machine and this interpreter: their trainers are this
interpreter's, run as root, which only root reaches (tests/security runs them
as another user), and etcd runs without auth, as `insecure_lab` would have it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from lamplighter.bare.etcd_store import Store
from lamplighter.bare.host_daemon import HostDaemon
from lamplighter.bare.keys import Keys
from lamplighter.bare.placer import HostEntry


def lab_host_daemon(
    store: Store,
    keys: Keys,
    me: str,
    hosts: Sequence[HostEntry],
    state_dir: Path,
    *,
    etcd_user: str,
    ttl_s: int,
    margin_s: float,
) -> HostDaemon:
    """The daemon of host `me`, on the monotonic clock; `etcd_user`'s jobs run as root here."""
    return HostDaemon(
        store,
        keys,
        me,
        list(hosts),
        state_dir,
        time.monotonic,
        ttl_s=ttl_s,
        margin_s=margin_s,
        trainer_users={etcd_user: "root"},
        root_trainers=True,
        confined=True,
    )
