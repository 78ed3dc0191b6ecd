"""The head's probe of many slurmd at once: which answer, which refuse, which stay silent, on real sockets."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from lamplighter.system.ports import answering, free_port


@pytest.fixture
def silent() -> Iterator[tuple[str, int]]:
    """A port whose listener's accept queue is full: a new connection's SYN is dropped, as a node that lost
    power never answers (the connection neither succeeds nor is refused)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    addr = srv.getsockname()
    filler = socket.create_connection(addr)  # fills the queue of one
    try:
        yield ("127.0.0.1", addr[1])
    finally:
        filler.close()
        srv.close()


def test_many_at_once_those_that_answer_and_not_the_refused_or_silent_ones(silent: tuple[str, int]) -> None:
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(3)]
    try:
        up = [("127.0.0.1", s.getsockname()[1]) for s in listeners]
        refused = ("127.0.0.1", free_port())  # nothing listens
        assert answering([*up, refused, silent], timeout_s=0.3) == set(up)
        assert answering([], timeout_s=0.3) == set()
    finally:
        for s in listeners:
            s.close()
