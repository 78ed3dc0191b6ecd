"""Reading a file that another user writes: the one bounded reader of run-directory files.

Root daemons read users' files (job.json, lighthouse.json, heartbeats, step
logs, stop-at), and a user's own scripts read files that other users could
have put in a shared run directory. Each such read:
- follows no link in the file's own name (O_NOFOLLOW) and opens the name
  without reading first (O_PATH), so a FIFO, a device (/dev/zero) or a socket
  in its place is refused before anything could block or stream;
- takes only a regular file owned by `owner` (the job's user; a user's
  script passes its own uid): a file someone else put there is refused;
- reads at most `max_bytes` (a larger file, a sparse one included, is refused
  from its size, or its last `max_bytes` for a log's tail), non-blocking.
Every refusal is an OwnedFileError naming the file and why; none echoes the
file's contents.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

KIB = 1024
MIB = 1024 * KIB


class OwnedFileError(OSError):
    """The file cannot be used: missing, a link, not a regular file, someone else's, or too large."""

    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = str(path)
        self.why = why


def _open_checked(path: Path | str, owner: int | None) -> tuple[int, os.stat_result]:
    try:
        pfd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise OwnedFileError(path, "no such file") from None
    except OSError as e:
        raise OwnedFileError(path, f"cannot open: {e.strerror}") from None
    try:
        st = os.fstat(pfd)
        if stat.S_ISLNK(st.st_mode):
            raise OwnedFileError(path, "is a symbolic link: not followed")
        if not stat.S_ISREG(st.st_mode):
            raise OwnedFileError(path, "is not a regular file (a FIFO, a device, a socket or a folder)")
        if owner is not None and st.st_uid != owner:
            raise OwnedFileError(path, f"belongs to uid {st.st_uid}, not to uid {owner}: ignored")
        # The checked inode itself, opened for reading through its O_PATH descriptor: no second lookup.
        fd = os.open(f"/proc/self/fd/{pfd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        if isinstance(e, OwnedFileError):
            raise
        raise OwnedFileError(path, f"cannot open: {e.strerror}") from None
    finally:
        os.close(pfd)
    return fd, st


def read_owned(path: Path | str, *, owner: int | None, max_bytes: int) -> bytes:
    """The whole file, a regular one of `owner` (None: anyone's) of at most `max_bytes`."""
    fd, st = _open_checked(path, owner)
    try:
        if st.st_size > max_bytes:
            raise OwnedFileError(path, f"holds {st.st_size} bytes, more than the {max_bytes} read")
        data = _read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise OwnedFileError(path, f"holds more than the {max_bytes} bytes read")
    return data


def read_owned_tail(path: Path | str, *, owner: int | None, max_bytes: int) -> tuple[bytes, bool]:
    """The file's last `max_bytes` (a log), and whether that is all of it."""
    fd, st = _open_checked(path, owner)
    try:
        start = max(0, st.st_size - max_bytes)
        os.lseek(fd, start, os.SEEK_SET)
        return _read(fd, max_bytes), start == 0
    finally:
        os.close(fd)


def _read(fd: int, limit: int) -> bytes:
    chunks, got = [], 0
    while got < limit:
        try:
            data = os.read(fd, min(1 << 16, limit - got))
        except BlockingIOError:
            break
        if not data:
            break
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)
