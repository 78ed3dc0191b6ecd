"""TCP ports: a free one (the Lighthouse, each group's rendezvous in local mode), and whether one answers."""

from __future__ import annotations

import errno
import selectors
import socket
import time
from collections.abc import Iterable


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the usual bind-to-0 trick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def accepts_connections(host: str, port: int, timeout_s: float = 0.2) -> bool:
    """Does something accept TCP connections there (the Lighthouse, a node's slurmd)?"""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def answering(addrs: Iterable[tuple[str, int]], timeout_s: float) -> set[tuple[str, int]]:
    """Which of these accept a TCP connection within `timeout_s`, all probed at once: the head's probe of
    every node's slurmd takes one timeout however many nodes are silent (a rack that lost power), not one each."""
    sel = selectors.DefaultSelector()
    out: set[tuple[str, int]] = set()
    try:
        for addr in set(addrs):
            try:
                family, kind, proto, _, sockaddr = socket.getaddrinfo(addr[0], addr[1], type=socket.SOCK_STREAM)[0]
                s = socket.socket(family, kind, proto)
            except OSError:
                continue  # a name that does not resolve: no answer
            s.setblocking(False)
            code = s.connect_ex(sockaddr)
            if code == 0:
                out.add(addr)
                s.close()
            elif code in (errno.EINPROGRESS, errno.EAGAIN):
                sel.register(s, selectors.EVENT_WRITE, addr)
            else:
                s.close()  # refused at once
        deadline = time.monotonic() + timeout_s
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _ in sel.select(left):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    out.add(key.data)
                sel.unregister(sock)
                sock.close()
    finally:
        for key in list(sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        sel.close()
    return out
