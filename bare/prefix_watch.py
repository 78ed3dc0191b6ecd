"""A watch on a key prefix: tells a host daemon that something under it changed, so that it reads only then.

Without it every host read the whole cluster prefix every cycle (2 requests a
second at a 0.5 s poll), which at 1,000 hosts is 2,000 reads a second on etcd
for a cluster that mostly does not change. The watch is one long request over
the gateway's streaming `/v3/watch`: an event only moves `newest` (the newest
revision it saw change the prefix), and the daemon's next cycle reads the
prefix if that is newer than its last read (the read stays the one source of
truth, consistent at one revision; an event the read already held costs nothing).

It is a hint, never a promise: when the stream ends (a member went, the start
revision was compacted, auth changed) `alive` falls, and the daemon reads
every cycle until it has opened another. A stream that stalls
without ending (a member cut off from its quorum) is caught by the revision
every other answer carries (Store.seen_revision): a lease renewal that shows a
newer revision than the last read makes the daemon read as well.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from typing import Any

import requests

from lamplighter.rundir.bounded_read import bounded_lines

log = logging.getLogger(__name__)

# One line of the stream is one watch response. Its events carry values users wrote (etcd bounds each at
# --max-request-bytes, 1.5 MiB by default); the daemon reading it is root, so a line is bounded too.
MAX_LINE = 8 << 20


class PrefixWatch:
    """A thread reading one watch stream: `newest` is the newest revision at which it saw the prefix change."""

    def __init__(self, session: requests.Session, url: str, create: dict[str, Any], timeout_s: float) -> None:
        self.newest = 0
        self.lived_s: float | None = None  # how long the stream lasted, once it ended
        self._opened = time.monotonic()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self.alive = True
        self.ended: str | None = None  # why the stream ended
        self._thread = threading.Thread(
            target=self._run, args=(session, url, create, timeout_s), name="etcd-watch", daemon=True
        )
        self._thread.start()

    def _run(self, session: requests.Session, url: str, create: dict[str, Any], timeout_s: float) -> None:
        why = "the stream ended"
        try:
            # No read timeout: a quiet cluster sends nothing for as long as it stays quiet.
            with session.post(url, json={"create_request": create}, stream=True, timeout=(timeout_s, None)) as resp:
                # The stream's socket, to be shut down by close(): closing the response from another
                # thread waits on the lock its reader holds, for as long as the cluster stays quiet.
                self._sock = getattr(getattr(resp.raw, "connection", None), "sock", None)
                resp.raise_for_status()
                # As it arrives (chunk_size None): a fixed size would wait for that many bytes of a quiet stream.
                for line in bounded_lines(resp.iter_content(chunk_size=None), MAX_LINE):
                    if self._stop.is_set():
                        return
                    if not line.strip():
                        continue
                    doc = json.loads(line)
                    result = doc.get("result") or {}
                    if "error" in doc or result.get("canceled"):
                        why = f"etcd ended it: {doc.get('error') or result.get('cancel_reason') or 'canceled'}"
                        if result.get("compact_revision"):
                            why += f" (compacted to {result['compact_revision']})"
                        break
                    for event in result.get("events") or ():
                        self.newest = max(self.newest, int((event.get("kv") or {}).get("mod_revision") or 0))
        except Exception as e:  # a stream closed under its reader raises whatever urllib3 was in
            why = f"{type(e).__name__}: {e}"
        finally:
            self.lived_s = time.monotonic() - self._opened
            self.ended, self.alive = why, False  # whatever happened since its last event is unknown: read
            session.close()
        if not self._stop.is_set():
            log.warning("etcd watch on %s: %s", url, why)

    def close(self) -> None:
        self._stop.set()
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # the reader wakes to an end of stream, and its thread ends
            except OSError:
                pass  # already closed
