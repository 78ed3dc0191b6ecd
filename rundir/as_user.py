"""Becoming a job's user for good, in a process root forked for it: the one way root's children drop to a user.

Used by the child that appends to a job's run directory (actions.py) and by the helpers that read and
parse what a job's user controls (supervisor/user_reads/helper.py).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# Looked up here, once: a child forked from a process with threads must not dlopen or dlsym (the loader's
# lock may have been held by another thread at the fork).
_LIBC = ctypes.CDLL(None, use_errno=True)
_CAPSET, _PRCTL = _LIBC.capset, _LIBC.prctl


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def become(uid: int, gid: int) -> None:
    """Become uid/gid for good, with no capability left (OSError: cannot).

    Root loses its capabilities with the uid; a daemon run as a dedicated user with ambient capabilities
    (deploy/README.md) would keep them across the change, so they are dropped here in every case, and the
    kernel's own word (/proc/self/status) is checked."""
    if (os.getresuid(), os.getresgid(), os.getgroups()) != ((uid,) * 3, (gid,) * 3, []):
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    data = (_CapData * 2)()  # all zero: no effective, permitted or inheritable capability (ambient goes too)
    if _CAPSET(ctypes.byref(_CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    for option, value in ((PR_SET_NO_NEW_PRIVS, 1), (PR_SET_DUMPABLE, 0)):
        if _PRCTL(option, value, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({option})")
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    held = {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapAmb") if int(status[k], 16)}
    if held:
        raise PermissionError(f"capabilities left after the drop: {held}")
