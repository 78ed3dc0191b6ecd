"""A Unix socket served from a thread, one connection at a time: the status and the standby sockets.

The socket is bound under a temporary name and renamed into place after its
mode is set, so it is never reachable with looser permissions; a stale socket
a killed daemon left is replaced, a live one is refused.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import threading
from pathlib import Path

log = logging.getLogger(__name__)


class UnixServer:
    def __init__(self, path: Path, what: str, *, mode: int, dir_mode: int, gid: int | None = None) -> None:
        self.path, self.what = path, what
        self._mode, self._dir_mode, self._gid = mode, dir_mode, gid
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def answer(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def start(self) -> UnixServer:
        self._prepare_dir()
        self._refuse_live_peer()
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind(str(tmp))
            os.chmod(tmp, self._mode)
            if self._gid is not None:
                os.chown(tmp, -1, self._gid)
            sock.listen(16)
            os.replace(tmp, self.path)  # also replaces a stale socket a killed daemon left
        except OSError as e:
            sock.close()
            tmp.unlink(missing_ok=True)
            raise OSError(e.errno, f"{self.what} {self.path}: cannot serve: {e.strerror or e}") from e
        sock.settimeout(0.2)  # lets close() stop the accept loop
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name=self.what.replace(" ", "-"), daemon=True)
        self._thread.start()
        return self

    def _prepare_dir(self) -> None:
        d = self.path.parent
        if not d.exists():
            d.mkdir(mode=self._dir_mode, parents=True)
            os.chmod(d, self._dir_mode)  # mkdir's mode is filtered by the umask
        if self.path.exists() and not stat.S_ISSOCK(os.lstat(self.path).st_mode):
            raise OSError(f"{self.what} {self.path}: exists and is not a socket; refusing to replace it")

    def _refuse_live_peer(self) -> None:
        if not self.path.exists():
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(str(self.path))
            except OSError:
                return  # stale: nobody listens
        raise OSError(f"{self.what} {self.path}: another daemon is serving it")

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as e:
                if self._stop.is_set():
                    return
                log.warning("%s %s: accept failed: %s", self.what, self.path, e)
                continue
            with conn:
                conn.setblocking(True)  # accept() hands over the listener's timeout
                self.answer(conn)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
