"""The etcd watch stream's lines, read by a root daemon: split as they arrive, each bounded (pure)."""

from __future__ import annotations

import pytest

from lamplighter.bare.prefix_watch import LineTooLong, bounded_lines


def test_a_watch_streams_lines_are_split_as_they_arrive_and_a_line_past_its_bound_is_refused() -> None:
    chunks = [b'{"a":', b'1}\n{"b":2}\n\n{"c"', b":3}"]
    assert list(bounded_lines(chunks, 16)) == [b'{"a":1}', b'{"b":2}', b"", b'{"c":3}']
    # A peer that never ends its line (or sends one huge event) costs the bound, not the daemon's memory.
    endless = (b"x" * 10 for _ in range(100))
    with pytest.raises(LineTooLong, match="more than 64 bytes"):
        list(bounded_lines(endless, 64))
    with pytest.raises(LineTooLong):
        list(bounded_lines([b"y" * 100 + b"\nok\n"], 64))  # a whole long line in one chunk
