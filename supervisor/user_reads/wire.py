"""One JSON object per line, each way, between the daemon and a user-reads helper; a line is bounded.

The daemon reads a helper's answer with a deadline and a size limit (rundir/bounded_read.py): a helper
that sends more, sends nothing or sends what is not one JSON object is a failed read, never a wait.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from lamplighter.rundir.bounded_read import TooLarge, read_bounded


class WireError(OSError):
    """The peer sent nothing in time, too much, or not one JSON object; or it is gone."""


def send(sock: socket.socket, obj: dict[str, Any]) -> None:
    sock.sendall(json.dumps(obj, separators=(",", ":")).encode() + b"\n")


def recv(sock: socket.socket, limit: int, timeout: float | None) -> dict[str, Any] | None:
    """The next object; None when the peer closed before sending anything (WireError: why not one)."""
    deadline = None if timeout is None else time.monotonic() + timeout

    def chunk(n: int) -> bytes:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
        return sock.recv(n)

    try:
        raw = read_bounded(chunk, limit, until=b"\n")
    except TooLarge as e:
        raise WireError(f"an answer of {e}") from None
    except TimeoutError:
        raise WireError(f"no answer within {timeout:g} s") from None
    except OSError as e:
        raise WireError(f"cannot read: {e.strerror or e}") from None
    if not raw:
        return None
    try:
        obj = json.loads(raw)
    except ValueError:
        raise WireError("an answer that is not JSON") from None
    if not isinstance(obj, dict):
        raise WireError("an answer that is not a JSON object")
    return obj
