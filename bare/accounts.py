"""Whose account a job's trainers run as on this host: the decision, from the etcd user who submitted the job.

The etcd user is the one etcd authenticated when the spec was written: it is the spec key's own segment
(specs/<user>/<job>), which only that user may write (etcd_roles.py). It maps to the local account of the
same name, or to the one the host config's `trainer_users` names. Refused, with the reason: no such account
here; uid 0 unless the host config's `root_trainers` allows it; or any account but the daemon's own when the
daemon is not root (it could not switch to it).
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary groups, as login would give them (initgroups)
    home: str


@dataclass(frozen=True)
class Refused:
    reason: str


def lookup(name: str) -> Account | None:
    """The local account `name` from the password and group databases (NSS); None if there is none."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(pw.pw_name, pw.pw_uid, pw.pw_gid, tuple(os.getgrouplist(pw.pw_name, pw.pw_gid)), pw.pw_dir)


def trainer_account(
    etcd_user: str,
    trainer_users: Mapping[str, str],
    root_trainers: bool,
    daemon_uid: int,
    find: Callable[[str], Account | None] = lookup,
) -> Account | Refused:
    name = trainer_users.get(etcd_user, etcd_user)
    via = f"etcd user {etcd_user}" + (f" (trainer_users: {name})" if name != etcd_user else "")
    account = find(name)
    if account is None:
        return Refused(f"{via} has no local account {name!r} on this host: add it, or map it in trainer_users")
    if account.uid == 0 and not root_trainers:
        return Refused(f"{via} maps to root (uid 0): trainers never run as root unless root_trainers: true")
    if daemon_uid != 0 and account.uid != daemon_uid:
        return Refused(
            f"{via} maps to uid {account.uid}, but this host daemon runs as uid {daemon_uid}, not root: it can "
            "start trainers only as itself"
        )
    return account
