"""The one bounded reader: up to the end of input or a line, never past its limit, from a real socket pair."""

from __future__ import annotations

import socket

import pytest

from lamplighter.rundir.bounded_read import TooLarge, bounded_lines, read_bounded


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


def test_a_streams_lines_come_as_they_complete_and_a_line_past_the_limit_is_refused() -> None:
    chunks = [b'{"a":', b'1}\n{"b":2}\n\n{"c"', b":3}"]
    assert list(bounded_lines(chunks, 16)) == [b'{"a":1}', b'{"b":2}', b"", b'{"c":3}']
    # A peer that never ends its line (or sends one huge line) costs the limit, not the reader's memory.
    with pytest.raises(TooLarge, match="more than 64 bytes"):
        list(bounded_lines((b"x" * 10 for _ in range(100)), 64))
    with pytest.raises(TooLarge):
        list(bounded_lines([b"y" * 100 + b"\nok\n"], 64))  # a whole long line in one chunk
