"""The one bounded reader: up to the end of input or a line, never past its limit, from a real socket pair."""

from __future__ import annotations

import socket

import pytest

from lamplighter.supervisor.bounded_read import TooLarge, read_bounded


def test_reads_to_the_end_a_line_or_refuses_more_than_the_limit() -> None:
    a, b = socket.socketpair()
    with a, b:
        b.sendall(b"one\ntwo")
        b.shutdown(socket.SHUT_WR)
        assert read_bounded(a.recv, 100) == b"one\ntwo"
    a, b = socket.socketpair()
    with a, b:
        b.sendall(b'{"argv": []}\n')  # the line, and the peer keeps the connection open: no wait for its end
        assert read_bounded(a.recv, 100, until=b"\n") == b'{"argv": []}\n'
    a, b = socket.socketpair()
    with a, b:
        b.sendall(b"x" * 101)
        b.shutdown(socket.SHUT_WR)
        with pytest.raises(TooLarge, match="more than 100 bytes"):
            read_bounded(a.recv, 100)
