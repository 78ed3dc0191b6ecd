"""A real, unprivileged local account for a test: made with useradd, removed with userdel (needs root).

No home directory and no login shell; its own group. Processes still running as it at the end (a test's
trainers) are killed by PID first, so userdel can remove it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

from lamplighter.bare.accounts import Account, lookup

LOCKED = 10  # useradd/userdel: cannot lock the password file (another one is running): try again


def _run(argv: list[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        if out.returncode == 0:
            return
        if out.returncode != LOCKED or time.monotonic() > deadline:
            raise RuntimeError(f"{' '.join(argv)}: exit {out.returncode}: {out.stderr.strip()}")
        time.sleep(0.1)


@contextmanager
def throwaway_user(prefix: str = "llt") -> Iterator[Account]:
    if os.geteuid() != 0:
        raise PermissionError("a throwaway account needs root (useradd)")
    name = f"{prefix}{secrets.token_hex(4)}"
    _run(["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
          "--user-group", name])  # fmt: skip
    account: Account | None = None
    try:
        account = lookup(name)
        assert account is not None and account.uid != 0, name
        yield account
    finally:
        uid = account.uid if account is not None else -1
        mine = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]
        for p in mine:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(mine, timeout=10)
        _run(["userdel", name])
