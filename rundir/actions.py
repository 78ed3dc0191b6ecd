"""Each action about a job, appended to that job's run directory too: `<run_dir>/actions.jsonl`, as the job's user.

A daemon's own action log (`<state_dir>/actions.jsonl`) stays on its node. The
run directory is shared by design (every node of the job reads job.json from
it), so the lines of every node's daemon about one job meet there, and
`lamplighter why JOB` reads them from a login node.

Root never writes there itself: the run directory is the user's, and its
name came from the job (a trainer's environment, its job.json). Each line is
written by a short-lived child that first becomes the job's user (its uid
and primary group, no supplementary groups: it can write nothing that user
could not), then opens the run directory without following a link
(O_DIRECTORY|O_NOFOLLOW), checks that the user owns it, and appends one whole
line (O_APPEND|O_CREAT|O_NOFOLLOW|O_NONBLOCK) to a regular file the user
owns. A link, a FIFO, a folder of someone else: refused, with the reason. The
child execs nothing (the job's interpreter is no root code) and is killed if
it takes longer than WRITE_TIMEOUT_S (a hung file system). As the user, it
also works under NFS root_squash. A run directory that cannot be written is
logged once and skipped: the action itself never fails for it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import pwd
import select
import signal
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lamplighter.rundir.as_user import become

log = logging.getLogger(__name__)

ACTIONS_FILE = "actions.jsonl"
WRITE_TIMEOUT_S = 2.0


# The one action line, which every writer formats here (the daemons' ActionLog below, the in-job agent, the
# host daemon, healthcheck, revive) and `lamplighter why` reads (action_history.py).
def format_action(
    now: float, node: str, action: str, target: str, reason: str, observation: dict[str, Any], **extra: Any
) -> str:
    """The line for one action: a JSON object with fixed keys first, without a trailing newline."""
    record: dict[str, Any] = {
        "time": datetime.fromtimestamp(now, tz=UTC).isoformat(timespec="milliseconds"),
        "ts": now,
        "node": node,
        "action": action,
        "target": target,
        "reason": reason,
        "observation": observation,
    }
    for k, v in extra.items():
        if k in record:
            raise ValueError(f"action log: extra field {k!r} would overwrite a fixed one")
        record[k] = v
    # default=str: an observation holding a Path or an enum still logs instead of raising mid-action.
    return json.dumps(record, default=str, separators=(",", ":"))


class FileSink:
    """A node's own action log (root's, under its state dir): whole lines, one write() each, so the daemon and
    the HealthCheckProgram or Prolog writing at once never interleave within a line. Never follows a link."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o640)

    def __call__(self, line: str) -> None:
        try:
            os.write(self._fd, (line + "\n").encode())
        except OSError as e:
            raise OSError(e.errno, f"action log {self.path}: cannot write: {e.strerror}") from e

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class RunDirWriteError(OSError):
    """The line could not be appended; says why (as the child saw it)."""


def _child(uid: int, gid: int, run_dir: str, data: bytes, report: int) -> None:
    """In the forked child: become the user, check, append; report a failure on `report`. Never returns."""
    code = 1
    try:
        try:
            become(uid, gid)
            dfd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            st = os.fstat(dfd)
            if st.st_uid != uid:
                raise RunDirWriteError(errno.EPERM, f"the run directory belongs to uid {st.st_uid}, not {uid}")
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(ACTIONS_FILE, flags, 0o644, dir_fd=dfd)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
                raise RunDirWriteError(errno.EPERM, f"{ACTIONS_FILE} is not a regular file of uid {uid}")
            os.write(fd, data)
            code = 0
        except OSError as e:
            os.write(report, (e.strerror or str(e)).encode()[:500])
    finally:
        os._exit(code)


def append_as(uid: int, gid: int, run_dir: str, line: str, timeout_s: float = WRITE_TIMEOUT_S) -> None:
    """Append one line to `<run_dir>/actions.jsonl` as uid/gid (RunDirWriteError: why not)."""
    data = (line.rstrip("\n") + "\n").encode()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child leaves through os._exit
        os.close(r)
        _child(uid, gid, run_dir, data, w)
    os.close(w)
    try:
        why = b""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([r], [], [], max(0.0, left))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise RunDirWriteError(errno.ETIMEDOUT, f"no answer within {timeout_s:g} s (a hung file system?)")
            chunk = os.read(r, 512)
            if not chunk:
                break  # the child exited
            why += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(r)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RunDirWriteError(errno.EPERM, why.decode(errors="replace") or f"the writer exited {status}")


def append_line(path: os.PathLike[str] | str, line: str) -> None:
    """Append one whole line in one write, following no link: the bare-metal host daemon's own writer (as the
    daemon's user; bare/ moves to writing as the job's user with its trainers, see deploy/SECURITY.md)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
    finally:
        os.close(fd)


def primary_gid(uid: int) -> int:
    """The user's primary group (passwd); KeyError if the uid has no entry."""
    return pwd.getpwuid(uid).pw_gid


class RunDirActions:
    """A sink for action lines that also go to the run directory of each job they concern, as its user."""

    def __init__(
        self,
        run_dir_of: Callable[[str], str | None],
        uid_of: Callable[[str], int | None],
        write: Callable[[int, int, str, str], None] = append_as,
    ) -> None:
        self.run_dir_of = run_dir_of
        self.uid_of = uid_of
        self._write = write
        self._failed: set[str] = set()

    def __call__(self, line: str, job_ids: Iterable[str]) -> None:
        targets: dict[str, int] = {}
        for j in job_ids:
            run_dir, uid = self.run_dir_of(j), self.uid_of(j)
            if run_dir and uid is not None:
                targets.setdefault(run_dir, uid)
        for run_dir, uid in sorted(targets.items()):
            try:
                self._write(uid, primary_gid(uid), run_dir, line)
                self._failed.discard(run_dir)
            except (OSError, KeyError) as e:
                if run_dir not in self._failed:
                    log.warning(
                        "not appending the action to %s/%s as uid %d (kept in the node's own log): %s",
                        run_dir,
                        ACTIONS_FILE,
                        uid,
                        e,
                    )
                    self._failed.add(run_dir)


# A daemon's action log: each line says when, on which node, what was done to what, why, and the observation
# that led to it, so an operator can audit every kill, drain and requeue from the log alone.
@dataclass
class ActionLog:
    node: str
    sink: Callable[[str], None]
    on_action: Callable[[str, str], None] | None = None  # (action, outcome) of every line: the metrics

    def write(
        self, now: float, action: str, target: str, reason: str, observation: dict[str, Any], **extra: Any
    ) -> str:
        line = format_action(now, self.node, action, target, reason, observation, **extra)
        self.sink(line)
        if self.on_action is not None:
            self.on_action(action, str(extra.get("outcome", "")))
        return line


def logging_sink(logger: logging.Logger) -> Callable[[str], None]:
    """A sink through logging (stderr under systemd ends up in the journal), prefixed to be grep-able."""

    def write(line: str) -> None:
        logger.info("action %s", line)

    return write
