"""The local status endpoint: a unix socket that answers one JSON document per connection.

Read-only by construction: the server never reads what a client sends, so no
request can make the daemon act. Who may read is decided by file permissions:
the socket is 0660 (owner and group, e.g. a `lamplighter` group of operators)
inside a directory that is created 0750. The socket is bound under a temporary
name and renamed into place after its mode is set, so it is never reachable
with looser permissions.

    server = StatusServer(Path("/run/lamplighter/status.sock"), lambda: {...}).start()
    read_status(Path("/run/lamplighter/status.sock"), timeout=5.0) -> dict   # `lamplighter status`
    server.close()
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lamplighter.rundir.bounded_read import TooLarge, read_bounded
from lamplighter.supervisor.unix_server import UnixServer

log = logging.getLogger(__name__)

SOCKET_MODE = 0o660
DIR_MODE = 0o750
SEND_TIMEOUT_S = 2.0  # a client that does not read cannot hold the server longer than this
DRAIN_TIMEOUT_S = 0.5
DRAIN_MAX_BYTES = 1024 * 1024
MAX_STATUS_BYTES = 16 * 1024 * 1024


class StatusError(Exception):
    """Reading the status failed; the message names the socket."""


class StatusServer(UnixServer):
    def __init__(
        self, path: Path, status: Callable[[], dict[str, Any]], mode: int = SOCKET_MODE, gid: int | None = None
    ) -> None:
        super().__init__(path, "status socket", mode=mode, dir_mode=DIR_MODE, gid=gid)
        self._status = status

    def start(self) -> StatusServer:
        super().start()
        return self

    def answer(self, conn: socket.socket) -> None:
        try:
            doc = self._status()
            body = json.dumps(doc, default=str)
        except Exception as e:  # a broken status must not end the server
            log.warning("status socket %s: status callable failed: %s", self.path, e)
            body = json.dumps({"error": f"{type(e).__name__}: {e}"})
        try:
            conn.settimeout(SEND_TIMEOUT_S)
            conn.sendall(body.encode() + b"\n")
            conn.shutdown(socket.SHUT_WR)
            self._discard_input(conn)
        except OSError as e:
            log.info("status socket %s: client went away: %s", self.path, e)

    @staticmethod
    def _discard_input(conn: socket.socket) -> None:
        # Closing with unread bytes resets the connection and the client could
        # lose the answer; so swallow (never interpret) what it sent, bounded.
        conn.settimeout(DRAIN_TIMEOUT_S)
        seen = 0
        while seen < DRAIN_MAX_BYTES:
            chunk = conn.recv(65536)
            if not chunk:
                return
            seen += len(chunk)


def read_status(path: Path, timeout: float = 5.0) -> dict[str, Any]:
    """The daemon's status document from its socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as s:
        s.settimeout(timeout)
        try:
            s.connect(str(path))
            answer = read_bounded(s.recv, MAX_STATUS_BYTES)
        except TooLarge as e:
            raise StatusError(f"status socket {path}: answer larger than {MAX_STATUS_BYTES} bytes") from e
        except FileNotFoundError as e:
            raise StatusError(f"status socket {path}: not there (is the daemon running?)") from e
        except PermissionError as e:
            raise StatusError(f"status socket {path}: permission denied (needs the socket's group)") from e
        except OSError as e:
            raise StatusError(f"status socket {path}: {e}") from e
    try:
        doc = json.loads(answer)
    except ValueError as e:
        raise StatusError(f"status socket {path}: answer is not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise StatusError(f"status socket {path}: answer is not a JSON object")
    return doc
