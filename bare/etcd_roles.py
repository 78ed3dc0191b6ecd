"""Who may write what in a bare-metal cluster's etcd: a role per host, per submitter, and one for operators.

With etcd's auth on, every request is made as an etcd user (the password buys a token; see etcd_store), and
a user may touch only the keys its roles grant (prefix permissions, keys.py's layout):

  host <h>    reads the whole cluster; writes hosts/<h> and out/<h> (its lease, its GPU check), placer (the
              election, which any host may win) and jobs/ (placements as the placer, failure reports, refusals)
  user <u>    writes specs/<u>/ (its own jobs, which the hosts run as its account); reads hosts/, out/, placer
              and jobs/ (`lamplighter status`), never another user's spec
  operator    writes out/ (`lamplighter hosts out|resume` of any host); reads the whole cluster

No host may write a spec, so none can choose what runs or as whom; a host may write placements, because
whichever host wins the election places (a compromised host can misplace groups and keep stale epochs
running: deploy/SECURITY.md). `lamplighter hosts roles` prints these as etcdctl commands; `apply` makes them
through the gateway (the lab's etcd, tests).
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass
from typing import Literal

from lamplighter.bare.etcd_store import EtcdError, Store, absent, prefix_end, put
from lamplighter.bare.keys import Keys
from lamplighter.configs.bare_metal import check_name


@dataclass(frozen=True)
class Grant:
    key: str
    prefix: bool  # the key and everything under it
    kind: Literal["read", "readwrite"]


@dataclass(frozen=True)
class Role:
    name: str
    grants: tuple[Grant, ...]


def host_role(keys: Keys, host: str) -> Role:
    return Role(
        f"lamplighter-{keys.cluster}-host-{check_name(host, 'host')}",
        (
            Grant(keys.root, True, "read"),
            Grant(keys.host(host), False, "readwrite"),
            Grant(keys.out(host), False, "readwrite"),
            Grant(keys.placer, False, "readwrite"),
            Grant(keys.jobs, True, "readwrite"),
        ),
    )


def submitter_role(keys: Keys, user: str) -> Role:
    return Role(
        f"lamplighter-{keys.cluster}-user-{check_name(user, 'etcd user')}",
        (
            Grant(keys.user_specs(user), True, "readwrite"),
            Grant(keys.hosts, True, "read"),
            Grant(keys.outs, True, "read"),
            Grant(keys.placer, False, "read"),
            Grant(keys.jobs, True, "read"),
        ),
    )


def operator_role(keys: Keys) -> Role:
    return Role(
        f"lamplighter-{keys.cluster}-operator", (Grant(keys.root, True, "read"), Grant(keys.outs, True, "readwrite"))
    )


def etcdctl_lines(role: Role, user: str) -> list[str]:
    """The etcdctl (3.4) commands that create `user` with `role`, to run as etcd's root user. `user add`
    asks for the password."""
    q = shlex.quote
    lines = [f"etcdctl user add {q(user)}", f"etcdctl role add {q(role.name)}"]
    for g in role.grants:
        prefix = " --prefix=true" if g.prefix else ""
        lines.append(f"etcdctl role grant-permission{prefix} {q(role.name)} {g.kind} {q(g.key)}")
    lines.append(f"etcdctl user grant-role {q(user)} {q(role.name)}")
    return lines


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _tolerant(store: Store, what: str, path: str, payload: dict[str, object], exists: str) -> None:
    """An auth call that may find its work done (a user or role made before)."""
    try:
        store.call(what, path, payload)
    except EtcdError as e:
        if exists not in str(e):
            raise


def apply(store: Store, role: Role, user: str, password: str) -> None:
    """Create `user` (with `password`) holding `role`, through the gateway, as a user allowed to (root)."""
    _tolerant(store, f"add etcd user {user}", "/auth/user/add", {"name": user, "password": password}, "already")
    _tolerant(store, f"add etcd role {role.name}", "/auth/role/add", {"name": role.name}, "already")
    for g in role.grants:
        perm: dict[str, object] = {"key": _b64(g.key), "permType": g.kind.upper()}
        if g.prefix:
            perm["range_end"] = _b64(prefix_end(g.key))
        store.call(f"grant {role.name} {g.kind} {g.key}", "/auth/role/grant", {"name": role.name, "perm": perm})
    store.call(f"grant {role.name} to {user}", "/auth/user/grant", {"user": user, "role": role.name})


def lets_write_specs(store: Store, keys: Keys) -> bool:
    """Would etcd let this client write a job's spec? A host must be refused: else any holder of its
    credentials (or, with auth off, of any certificate) decides what runs on every host, as whom.

    Asked without writing anything: a transaction whose condition fails, so it never writes, but etcd checks
    the permissions of every operation in it first."""
    probe = keys.spec("lamplighter-probe", "probe")
    never = {**absent(probe), "create_revision": "-1"}  # no key was created at revision -1
    try:
        store.txn("check that this host may not write job specs", [never], [put(probe, "never written")])
    except EtcdError as e:
        if "permission denied" in str(e):
            return False
        raise
    return True
