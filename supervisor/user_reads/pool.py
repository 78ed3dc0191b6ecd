"""UserReads: the daemon's side of the user-reads helpers; what the compute loop calls instead of parsing.

One helper per (uid, kind): "files" (job.json, lighthouse.json: read in the cycle) and "lighthouse"
(the /status page: read in LighthouseReads' threads), so a slow page never holds a file read up. A
helper answers one request at a time, within a deadline; one that does not, or answers what
records.py refuses, is killed through its pidfd and the read failed. Its (uid, kind) then fails fast
for BACKOFF_S, so that a run directory on a hung file system does not leave a helper stuck in the
kernel every cycle, and a fresh helper is forked after, unless MAX_STUCK killed ones of that (uid, kind)
have not ended yet. Helpers of users with no trainer here are closed (`keep`).

Every failure keeps the meaning the daemon gave it before: a job.json that cannot be read gets the
fallback (retried after job_settings.RETRY_S), a lighthouse.json the job's configured address, a
page a LighthouseStatusError (silence excused, or "unreadable").
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lamplighter.lighthouse.status import LighthouseStatus, LighthouseStatusError
from lamplighter.rundir.actions import primary_gid
from lamplighter.supervisor.node.job_settings import JobSettings, fallback, read_job_settings
from lamplighter.supervisor.user_reads import records, wire
from lamplighter.supervisor.user_reads.zygote import Spawned, Zygote, ZygoteError

log = logging.getLogger(__name__)

Kind = Literal["files", "lighthouse"]
FILES_TIMEOUT_S = 2.0  # a job.json or lighthouse.json of a few KiB: longer is a hung file system
SPAWN_TIMEOUT_S = 2.0
BACKOFF_S = 30.0
# Helpers of one (uid, kind) killed and not yet ended (stuck in the kernel on a hung file system, where
# SIGKILL waits): past this many no new one is forked, so a hang costs the node this many tasks, not one
# more every back-off (the unit's TasksMax).
MAX_STUCK = 2


class ReadFailed(OSError):
    """The helper gave no record: why (it is gone, timed out, or answered what the daemon refuses)."""


@dataclass
class _Helper:
    spawned: Spawned
    lock: threading.Lock = field(default_factory=threading.Lock)

    def kill(self) -> int:
        """SIGKILL it; its pidfd is the caller's, to see it end (one stuck in the kernel may not)."""
        try:
            signal.pidfd_send_signal(self.spawned.pidfd, signal.SIGKILL)
        except OSError:
            pass  # already gone
        self.spawned.sock.close()
        return self.spawned.pidfd

    def close(self) -> None:
        self.spawned.sock.close()
        try:
            os.close(self.spawned.pidfd)
        except OSError:
            pass


class UserReads:
    def __init__(
        self, zygote: Zygote, clock: Callable[[], float] = time.monotonic, files_timeout_s: float = FILES_TIMEOUT_S
    ) -> None:
        self._zygote = zygote
        self.files_timeout_s = files_timeout_s
        self._clock = clock
        self._helpers: dict[tuple[int, Kind], _Helper] = {}
        self._failed: dict[tuple[int, Kind], tuple[float, str]] = {}  # -> (when, why): the back-off
        self._ending: dict[tuple[int, Kind], list[tuple[int, int]]] = {}  # killed, not seen ended: (pid, pidfd)
        self._lock = threading.Lock()
        self.spawned = 0  # helpers forked so far (the status document, tests)

    @classmethod
    def start(cls, allow_threads: bool = False) -> UserReads:
        return cls(Zygote.start(allow_threads))

    # -- what the loop calls -----------------------------------------------------------

    def settings(self, path: str | None, owner: int) -> JobSettings:
        """As job_settings.read_job_settings, read and parsed by the owner's helper."""
        if path is None:
            return read_job_settings(None, owner)  # nothing to read: the same fallback
        try:
            rec = self.call(owner, "files", {"op": "settings", "path": path})
            return records.settings_from(rec, path, owner)
        except (ReadFailed, records.RecordError) as e:
            return fallback(f"not read: {e}", path, owner, retryable=True)

    def address(self, run_dir: Path, owner: int | None) -> tuple[str | None, str | None]:
        """As rundir.contract.lighthouse_address, read and parsed by the owner's helper."""
        if owner is None:
            return None, "the job's user is not known: its lighthouse.json is not read"
        try:
            return records.address_from(self.call(owner, "files", {"op": "address", "run_dir": str(run_dir)}))
        except (ReadFailed, records.RecordError) as e:
            return None, f"{run_dir}: lighthouse.json not read: {e}"

    def status(self, owner: int, address: str, timeout: float) -> LighthouseStatus:
        """As lighthouse.status.fetch_status, fetched and parsed by the owner's helper."""
        req = {"op": "status", "address": address, "timeout": timeout}
        try:
            rec = self.call(owner, "lighthouse", req, timeout + self.files_timeout_s)
            return records.status_from(rec)
        except (ReadFailed, records.RecordError) as e:
            raise LighthouseStatusError(f"cannot read {address}: {e}") from None

    def fetcher(self, owner: int) -> Callable[[str, float], LighthouseStatus]:
        return lambda address, timeout: self.status(owner, address, timeout)

    def keep(self, owners: Iterable[int]) -> None:
        """Close the helpers of users with no trainer here any more."""
        wanted = set(owners)
        with self._lock:
            gone = [k for k in self._helpers if k[0] not in wanted]
            helpers = [self._helpers.pop(k) for k in gone]
            for k in [k for k in self._failed if k[0] not in wanted]:
                del self._failed[k]
            for k in [k for k in self._ending if k[0] not in wanted]:
                for _, fd in self._ending.pop(k):
                    os.close(fd)
        for h in helpers:
            with h.lock:
                h.close()

    def check(self) -> None:
        """ZygoteError if the zygote is gone: no helper can be forked any more, and a fresh zygote can be forked
        only before threads start. The daemon ends on it, and systemd starts a fresh one (trainers run on)."""
        why = self._zygote.gone()
        if why is not None:
            raise ZygoteError(f"{why}: no job's files can be read as its user any more")

    def helper_pids(self) -> dict[tuple[int, str], int]:
        with self._lock:
            return {k: h.spawned.pid for k, h in self._helpers.items()}

    def close(self) -> None:
        self.keep(())
        self._zygote.close()

    def _still_ending(self, key: tuple[int, Kind]) -> list[int]:
        """The pids of key's killed helpers that have not ended yet (a pidfd turns readable when it ends)."""
        left = []
        for pid, fd in self._ending.get(key, []):
            if select.select([fd], [], [], 0)[0]:
                os.close(fd)
            else:
                left.append((pid, fd))
        self._ending[key] = left
        return [pid for pid, _ in left]

    # -- one request -------------------------------------------------------------------

    def call(self, owner: int, kind: Kind, req: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """The record the owner's helper answers to `req` within `timeout` (default files_timeout_s; ReadFailed: none)."""
        key = (owner, kind)
        h = self._helper(key)
        with h.lock:
            try:
                wire.send(h.spawned.sock, req)
                wait = self.files_timeout_s if timeout is None else timeout
                rec = wire.recv(h.spawned.sock, records.MAX_RECORD_BYTES, wait)
                if rec is None:
                    raise wire.WireError("the helper ended")
                return rec
            except (wire.WireError, OSError) as e:
                why = f"the reader as uid {owner} (pid {h.spawned.pid}): {e}"
                self._fail(key, h, why)
                raise ReadFailed(why) from None

    def _fail(self, key: tuple[int, Kind], h: _Helper, why: str) -> None:
        pidfd = h.kill()
        with self._lock:
            if self._helpers.get(key) is h:
                del self._helpers[key]
            self._failed[key] = (self._clock(), why)
            self._ending.setdefault(key, []).append((h.spawned.pid, pidfd))
        log.warning("%s; no new one for %g s", why, BACKOFF_S)

    def _helper(self, key: tuple[int, Kind]) -> _Helper:
        with self._lock:
            h = self._helpers.get(key)
            if h is not None:
                return h
            failed = self._failed.get(key)
            if failed is not None and self._clock() - failed[0] < BACKOFF_S:
                raise ReadFailed(f"{failed[1]} ({self._clock() - failed[0]:.0f} s ago)")
            owner = key[0]
            stuck = self._still_ending(key)
            if len(stuck) >= MAX_STUCK:
                why = (
                    f"{len(stuck)} readers as uid {owner} (pids {', '.join(map(str, stuck))}) have not ended since "
                    "they were killed (stuck in the kernel: a hung file system?): no new one until they do"
                )
                self._failed[key] = (self._clock(), why)
                raise ReadFailed(why)
            try:
                spawned = self._zygote.spawn(owner, primary_gid(owner), SPAWN_TIMEOUT_S)
            except (ZygoteError, KeyError) as e:
                why = f"no reader as uid {owner}: {e if isinstance(e, ZygoteError) else 'no passwd entry'}"
                self._failed[key] = (self._clock(), why)
                raise ReadFailed(why) from None
            h = _Helper(spawned)
            try:
                hello = wire.recv(spawned.sock, 4096, SPAWN_TIMEOUT_S)
            except wire.WireError as e:
                hello = {"error": str(e)}
            if hello is None or hello.get("uid") != owner or "error" in hello:
                self._ending.setdefault(key, []).append((spawned.pid, h.kill()))
                why = f"the reader as uid {owner} did not start: {(hello or {}).get('error', 'it ended')}"
                self._failed[key] = (self._clock(), why)
                raise ReadFailed(why)
            self._helpers[key] = h
            self.spawned += 1
            return h
