"""Reading what a peer sends, bounded: an answer or a line over a socket or a pipe, never without a limit.

One reader for the status socket's answer (supervisor/status_socket.py), the Lighthouse's page
(lighthouse/status.py) and a standby's activation line (launch/standby.py): the caller gives `recv` (which
sets any deadline of its own) and the limit; a peer that sends more is an error, never a larger buffer.
And the lines of a stream that goes on (etcd's watch, bare/prefix_watch.py), each bounded the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

CHUNK = 1 << 16


class TooLarge(ValueError):
    """The peer sent more than the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} bytes")
        self.limit = limit


def read_bounded(recv: Callable[[int], bytes], limit: int, until: bytes | None = None) -> bytes:
    """Chunks from `recv` up to the end of input, or up to a chunk that ends with `until` (a line: b"\\n");
    TooLarge once more than `limit` bytes came."""
    buf = bytearray()
    while True:
        data = recv(CHUNK)
        if not data:
            return bytes(buf)
        buf += data
        if len(buf) > limit:
            raise TooLarge(limit)
        if until is not None and buf.endswith(until):
            return bytes(buf)


def bounded_lines(chunks: Iterable[bytes], limit: int) -> Iterator[bytes]:
    """The lines of a stream of chunks (without their newline), as they complete; TooLarge once a line
    (or what has come of it) is longer than `limit`."""
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        while (i := buf.find(b"\n")) >= 0:
            if i > limit:
                raise TooLarge(limit)
            yield bytes(buf[:i])
            del buf[: i + 1]
        if len(buf) > limit:
            raise TooLarge(limit)
    if buf:
        yield bytes(buf)
