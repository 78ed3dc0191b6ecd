"""Who a user name is on this machine: the one lookup of a configured owner."""

from __future__ import annotations

import pwd


def uid_of(user: str) -> int:
    """The uid of a user name or of a number given as text; ValueError naming the user when this machine has none."""
    if user.isdigit():
        return int(user)
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        raise ValueError(f"no user {user!r} on this machine (getent passwd {user})") from None
