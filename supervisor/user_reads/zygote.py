"""The fork server: started before the daemon has a thread, it forks each user-reads helper.

A helper must be a process of its own, as the job's user, and cheap: the daemon's interpreter may
not be one a user can run (a venv under /root), and an exec'd Python would pay its start-up and
imports per helper. Forking the daemon itself is unsafe once it has threads (a lock held by another
thread at the fork stays held in the child). So the daemon forks this zygote first, while it has one
thread, and the zygote, which never starts a thread, forks the helpers: each shares the zygote's
pages (the parsers are imported once) and execs nothing.

The zygote keeps no descriptor but its control socket (stdin, stdout and stderr go to /dev/null), so
a helper inherits none of the daemon's files, sockets or locks. Its only input is the daemon's: a
request "uid gid". Its answer carries two descriptors (SCM_RIGHTS): the daemon's end of a socket
pair whose other end the helper serves (helper.py), and a pidfd of the helper, so that the daemon
can kill the very process it asked for. Helpers are reaped by the kernel (SIGCHLD ignored). The
zygote ends when the daemon's end of the control socket closes, the daemon's death included; a
helper ends when the daemon closes its socket.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from dataclasses import dataclass

from lamplighter.supervisor.user_reads import helper

CTL_FD = 3


class ZygoteError(OSError):
    """No helper could be had: the zygote is gone, or it could not fork one."""


@dataclass(frozen=True)
class Spawned:
    sock: socket.socket  # the daemon's end of the helper's socket
    pidfd: int
    pid: int


def _zygote(ctl: socket.socket) -> None:  # pragma: no cover - runs in the forked zygote, leaves by os._exit
    code = 0
    try:
        fd = ctl.detach()
        if fd != CTL_FD:
            os.dup2(fd, CTL_FD, inheritable=False)  # the old number goes with the closerange below
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(CTL_FD + 1, os.sysconf("SC_OPEN_MAX"))
        ctl = socket.socket(fileno=CTL_FD)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        helper.warm()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)  # the daemon's own handlers are not the zygote's
        while True:
            msg = ctl.recv(64)
            if not msg:
                break
            try:
                uid, gid = (int(x) for x in msg.split())
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            except (ValueError, OSError) as e:
                ctl.send(f"error {e}".encode())
                continue
            pid = os.fork()
            if pid == 0:
                try:
                    ctl.close()
                    ours.close()
                    helper.serve(theirs, uid, gid)
                finally:
                    os._exit(0)
            theirs.close()
            try:
                pidfd = os.pidfd_open(pid)
                socket.send_fds(ctl, [f"ok {pid}".encode()], [ours.fileno(), pidfd])
                os.close(pidfd)
            except OSError as e:
                os.kill(pid, signal.SIGKILL)
                ctl.send(f"error {e}".encode())
            ours.close()
    except BaseException:
        code = 1
    finally:
        os._exit(code)


class Zygote:
    """The daemon's side of the fork server."""

    def __init__(self, ctl: socket.socket, pid: int) -> None:
        self._ctl = ctl
        self.pid = pid
        self._lock = threading.Lock()

    @classmethod
    def start(cls, allow_threads: bool = False) -> Zygote:
        """Fork the zygote: call it while this process has a single thread (tests: `allow_threads`)."""
        if threading.active_count() > 1 and not allow_threads:
            raise RuntimeError(f"the zygote must be forked before any thread starts ({threading.active_count()} run)")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the zygote leaves through os._exit
            ours.close()
            _zygote(theirs)
        theirs.close()
        return cls(ours, pid)

    def spawn(self, uid: int, gid: int, timeout: float) -> Spawned:
        """A new helper serving as uid/gid (ZygoteError: none)."""
        with self._lock:
            try:
                self._ctl.settimeout(timeout)
                self._ctl.send(f"{uid} {gid}".encode())
                msg, fds, _, _ = socket.recv_fds(self._ctl, 256, 2)
            except OSError as e:
                raise ZygoteError(f"the user-reads zygote (pid {self.pid}) did not answer: {e}") from None
        if not msg:
            raise ZygoteError(f"the user-reads zygote (pid {self.pid}) is gone")
        if not msg.startswith(b"ok ") or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            raise ZygoteError(f"the user-reads zygote could not start a helper: {msg.decode(errors='replace')}")
        return Spawned(socket.socket(fileno=fds[0]), fds[1], int(msg.split()[1]))

    def gone(self) -> str | None:
        """Why the zygote is no longer there (reaped here), or None while it runs."""
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return f"the user-reads zygote (pid {self.pid}) is gone"
        if pid == 0:
            return None
        how = (
            f"killed by signal {os.WTERMSIG(status)}"
            if os.WIFSIGNALED(status)
            else f"exit {os.waitstatus_to_exitcode(status)}"
        )
        return f"the user-reads zygote (pid {self.pid}) ended ({how})"

    def close(self) -> None:
        """The zygote ends when it reads the end of its control socket; reaped here."""
        self._ctl.close()
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
