"""A minimal sd_notify(3) client: tells systemd we are ready, alive, stopping.

The environment is a parameter (a mapping), so the logic never reads globals
and tests can point it at their own socket. NOTIFY_SOCKET may be a filesystem
path or, when it starts with '@', a Linux abstract-namespace name.

Typical use by the daemon:

    notifier = Notifier.from_env(os.environ)      # None-safe: no-op if unset
    notifier.ready(status="watching 2 trainers")
    every watchdog_interval(os.environ, os.getpid()) seconds: notifier.watchdog()
    on SIGTERM: notifier.stopping()
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

ENV_NOTIFY_SOCKET = "NOTIFY_SOCKET"
ENV_WATCHDOG_USEC = "WATCHDOG_USEC"
ENV_WATCHDOG_PID = "WATCHDOG_PID"


class NotifyError(OSError):
    """Sending a notification failed; carries the socket address."""


def socket_address(notify_socket: str) -> str | bytes:
    """The address to send to: '@name' becomes the abstract name b'\\0name'."""
    if notify_socket.startswith("@"):
        return b"\0" + notify_socket[1:].encode()
    return notify_socket


def watchdog_interval(env: Mapping[str, str], pid: int) -> float | None:
    """Seconds between WATCHDOG=1 pings, or None when no watchdog is asked of this process.

    systemd sets WATCHDOG_USEC (the timeout); pinging at half of it is what
    sd_watchdog_enabled(3) recommends. WATCHDOG_PID, when set, names the one
    process meant, so a child that inherited the environment stays quiet.
    """
    usec = env.get(ENV_WATCHDOG_USEC)
    if not usec:
        return None
    wpid = env.get(ENV_WATCHDOG_PID)
    if wpid:
        try:
            if int(wpid) != pid:
                return None
        except ValueError:
            return None
    try:
        timeout = int(usec)
    except ValueError:
        return None
    if timeout <= 0:
        return None
    return timeout / 2 / 1_000_000


@dataclass
class Notifier:
    """Sends state strings to systemd's notification socket; a no-op without one."""

    notify_socket: str | None
    # False (the daemon's): a failed send is logged, once until one succeeds, and the caller goes on. A
    # daemon must not end because systemd's socket went away for a moment (a daemon-reexec, a test's).
    strict: bool = True
    _failing: bool = field(default=False, init=False, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str], strict: bool = True) -> Notifier:
        return cls(env.get(ENV_NOTIFY_SOCKET) or None, strict)

    @property
    def enabled(self) -> bool:
        return self.notify_socket is not None

    def notify(self, *assignments: str) -> bool:
        """Send 'KEY=VALUE' lines in one datagram. False if there is no socket to send to (or, not strict,
        the send failed)."""
        if self.notify_socket is None:
            return False
        for a in assignments:
            if "=" not in a or "\n" in a:
                raise ValueError(f"sd_notify: {a!r} is not a single KEY=VALUE line")
        payload = "\n".join(assignments).encode()
        addr = socket_address(self.notify_socket)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            try:
                s.sendto(payload, addr)
            except OSError as e:
                err = NotifyError(e.errno, f"sd_notify to {self.notify_socket!r} failed: {e.strerror}")
                if self.strict:
                    raise err from e
                if not self._failing:
                    log.warning("%s (%s not told; said again once a notification gets through)", err, payload[:40])
                self._failing = True
                return False
        if self._failing:
            log.warning("sd_notify to %r works again", self.notify_socket)
        self._failing = False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.notify("READY=1", *self._status(status))

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.notify(*self._status(text))

    def stopping(self, status: str | None = None) -> bool:
        return self.notify("STOPPING=1", *self._status(status))

    @staticmethod
    def _status(text: str | None) -> list[str]:
        if text is None:
            return []
        # STATUS is one line; a newline would start a bogus assignment.
        return ["STATUS=" + text.replace("\n", " ")]
