"""Event-driven process exit detection through pidfds.

One thread blocks in a selector on a pidfd per watched process and records
each exit with the clock's time the moment the kernel reports it; nothing
polls. The status is read with waitid(WNOWAIT), so the process stays a
zombie until its owner reaps it: its PID (and process group ID) cannot be
reused while the supervisor may still signal it.
"""

from __future__ import annotations

import os
import selectors
import threading
from collections.abc import Callable
from dataclasses import dataclass

from lamplighter.policy.observations import LighthouseDown, Observation, ProcessExited
from lamplighter.system.trainer_proc import TrainerProc


@dataclass(frozen=True)
class _Lighthouse:
    pid: int


def _status(pidfd: int) -> int:
    """Popen-style return code (negative: signal); -255 when the process is not our child."""
    try:
        r = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        return -255
    if r is None:
        return -255
    return r.si_status if r.si_code == os.CLD_EXITED else -r.si_status


class ExitWatcher:
    """Reports ProcessExited / LighthouseDown for watched processes as soon as they end."""

    def __init__(self, clock: Callable[[], float], on_exit: Callable[[], None] | None = None) -> None:
        self._clock = clock
        self._on_exit = on_exit  # e.g. wake the daemon's loop: an exit is acted on now, not at the next cycle
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._pending: list[Observation] = []
        self._wake_r, self._wake_w = os.pipe()
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._event = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="exit-watcher", daemon=True)
        self._thread.start()

    def watch_trainer(self, proc: TrainerProc) -> None:
        self._watch(proc.pid, proc)

    def watch_lighthouse(self, pid: int) -> None:
        self._watch(pid, _Lighthouse(pid))

    def _watch(self, pid: int, what: TrainerProc | _Lighthouse) -> None:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            # Gone before we looked: report it now rather than never.
            self._record(what, -255)
            return
        with self._lock:
            self._sel.register(fd, selectors.EVENT_READ, what)
        os.write(self._wake_w, b"x")

    def _record(self, what: TrainerProc | _Lighthouse, rc: int) -> None:
        t = self._clock()
        obs: Observation
        if isinstance(what, _Lighthouse):
            obs = LighthouseDown(pid=what.pid, returncode=rc, t=t)
        else:
            obs = ProcessExited(
                group=what.group, rank=what.rank, attempt=what.attempt, pid=what.pid, returncode=rc, t=t
            )
        with self._lock:
            self._pending.append(obs)
        self._event.set()
        if self._on_exit is not None:
            self._on_exit()

    def _run(self) -> None:
        while not self._closed:
            for key, _ in self._sel.select():
                if key.data is None:
                    os.read(self._wake_r, 4096)
                    continue
                with self._lock:
                    self._sel.unregister(key.fileobj)
                rc = _status(key.fd)
                os.close(key.fd)
                self._record(key.data, rc)

    def wait(self, timeout: float) -> bool:
        """Block until an exit is pending (True) or the timeout passes (False)."""
        return self._event.wait(timeout)

    def observe(self, now: float) -> list[Observation]:
        """Exits seen since the last call (each carries its own detection time)."""
        with self._lock:
            out, self._pending = self._pending, []
            self._event.clear()
        return out

    def close(self) -> None:
        self._closed = True
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=5)
        for key in list(self._sel.get_map().values()):
            if key.data is not None:
                os.close(key.fd)
        self._sel.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
