"""Read the torchft Lighthouse's quorum from its `/status` page.

This torchft version serves no JSON: `/status` is an HTML fragment (quorum id,
the previous quorum's members with their step and addresses, and the
heartbeats with their age). The parser works on that fragment's text and the
classes torchft puts on members (`recovering`) and heartbeats (`old`), and is
tested on pages recorded from the real Lighthouse. A page it cannot read is an
error that says so, never an empty quorum.

The read itself is bounded, whoever serves the address: at most
MAX_STATUS_BYTES, all of it (connecting, sending, every read) within the
timeout, and a redirect is an error, never followed. A plain HTTP/1.0 GET over
a socket, so that no library's per-read timeout lets a server that trickles
one byte at a time hold the reader.
"""

from __future__ import annotations

import re
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass, field
from html.parser import HTMLParser

from lamplighter.rundir.bounded_read import TooLarge, read_bounded

MAX_STATUS_BYTES = 1 << 20  # torchft's page is a few KiB for dozens of replicas


class LighthouseStatusError(Exception):
    """The Lighthouse could not be reached, or its page was not what this parser knows."""


class LighthouseStatusUnreadable(LighthouseStatusError):
    """The Lighthouse answered, with a page this parser does not know (another torchft's): unlike a Lighthouse
    that is down for a restart, this does not pass, and progress cannot be read from it (the daemon says so)."""


@dataclass(frozen=True)
class Member:
    replica_id: str  # as torchft reports it: "<group>:<uuid>"
    step: int
    manager: str
    store: str
    world_size: int
    recovering: bool

    @property
    def group(self) -> str:
        """lamplighter's group id: torchft appends ':<uuid4>' to the replica id on every start."""
        return self.replica_id.split(":", 1)[0]


@dataclass(frozen=True)
class Heartbeat:
    replica_id: str
    age_s: float
    old: bool  # torchft's own verdict: older than its heartbeat timeout

    @property
    def group(self) -> str:
        return self.replica_id.split(":", 1)[0]


@dataclass(frozen=True)
class LighthouseStatus:
    quorum_id: int
    next_quorum: str
    previous_quorum_id: int | None
    quorum_age_s: float | None
    members: list[Member] = field(default_factory=list)
    heartbeats: list[Heartbeat] = field(default_factory=list)

    def live_groups(self) -> set[str]:
        return {h.group for h in self.heartbeats if not h.old}

    def max_step(self) -> int | None:
        return max((m.step for m in self.members), default=None)


_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}


def parse_duration(text: str) -> float:
    """Rust's Debug format for Duration: '10.003483856s', '803.2ms', '1.5µs'."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(s|ms|µs|us|ns)\s*", text)
    if not m:
        raise LighthouseStatusUnreadable(f"not a duration: {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


class _Splitter(HTMLParser):
    """Collects the page's loose text, and the text of each member div and heartbeat li with its classes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.loose: list[str] = []
        self.blocks: list[tuple[str, set[str], list[str]]] = []
        self._stack: list[tuple[str, int | None]] = []  # (tag, index into blocks or None)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "img", "link", "meta"):
            self._text("\n")
            return
        classes = set((dict(attrs).get("class") or "").split())
        kind = "member" if "member" in classes else "heartbeat" if "heartbeat" in classes else None
        if kind:
            self.blocks.append((kind, classes, []))
            self._stack.append((tag, len(self.blocks) - 1))
        else:
            self._stack.append((tag, None))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._text("\n")  # <br/> and friends open nothing

    def handle_endtag(self, tag: str) -> None:
        if not any(t == tag for t, _ in self._stack):
            return  # a stray end tag must not close the member we are in
        while self._stack:
            open_tag, _ = self._stack.pop()
            if open_tag == tag:
                break
        self._text("\n")

    def handle_data(self, data: str) -> None:
        self._text(data)

    def _text(self, data: str) -> None:
        for _, idx in reversed(self._stack):
            if idx is not None:
                self.blocks[idx][2].append(data)
                return
        self.loose.append(data)


def _field(text: str, label: str) -> str:
    m = re.search(rf"{label}:\s*(\S+)", text)
    if not m:
        raise LighthouseStatusUnreadable(f"member without '{label}:' in {text.strip()!r}")
    return m.group(1)


def parse_status(html: str) -> LighthouseStatus:
    """The page's quorum; LighthouseStatusUnreadable when the page is not the one this parser knows."""
    p = _Splitter()
    p.feed(html)
    p.close()
    loose = "".join(p.loose)
    qid = re.search(r"Current quorum_id:\s*(-?\d+)", loose)
    if not qid:
        raise LighthouseStatusUnreadable("no 'Current quorum_id' on the page: not a torchft Lighthouse /status page?")
    nxt = re.search(r"Next quorum status:\s*(.+)", loose)
    prev = re.search(r"Previous quorum id:\s*(\d+)", loose)
    age = re.search(r"Quorum age:\s*([0-9.]+\s*(?:s|ms|µs|us|ns))", loose)
    members: list[Member] = []
    heartbeats: list[Heartbeat] = []
    for kind, classes, parts in p.blocks:
        text = "".join(parts)
        if kind == "member":
            name = text.strip().splitlines()[0].strip()
            members.append(
                Member(
                    replica_id=name,
                    step=int(_field(text, "Step")),
                    manager=_field(text, "Manager"),
                    store=_field(text, "TCPStore"),
                    world_size=int(_field(text, r"World size")),
                    recovering="recovering" in classes,
                )
            )
        else:
            m = re.search(r"(\S+): seen (\S+) ago", text)
            if not m:
                raise LighthouseStatusUnreadable(f"heartbeat line not understood: {text.strip()!r}")
            heartbeats.append(Heartbeat(m.group(1), parse_duration(m.group(2)), "old" in classes))
    return LighthouseStatus(
        quorum_id=int(qid.group(1)),
        next_quorum=nxt.group(1).strip() if nxt else "",
        previous_quorum_id=int(prev.group(1)) if prev else None,
        quorum_age_s=parse_duration(age.group(1)) if age else None,
        members=members,
        heartbeats=heartbeats,
    )


def fetch_status(address: str, timeout: float = 2.0, max_bytes: int = MAX_STATUS_BYTES) -> LighthouseStatus:
    """GET <address>/status from a Lighthouse (address like http://host:29510), bounded in bytes and time."""
    url = address.rstrip("/") + "/status"
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LighthouseStatusError(f"Lighthouse address must start with http:// : {address!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        raise LighthouseStatusError(f"Lighthouse address {address!r}: {e}") from None
    body = http_get(parts.scheme, parts.hostname, port, parts.path, timeout, max_bytes, url)
    try:
        return parse_status(body.decode("utf-8", "replace"))
    except LighthouseStatusUnreadable as e:
        raise LighthouseStatusUnreadable(f"{url} answered a page this lamplighter cannot read: {e}") from None


def http_get(scheme: str, host: str, port: int, path: str, timeout: float, max_bytes: int, url: str) -> bytes:
    """The body of a 200 answer to GET path, or LighthouseStatusError saying why not."""
    deadline = time.monotonic() + timeout

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LighthouseStatusError(f"cannot read {url}: no whole answer within {timeout:g} s")
        return remaining

    try:
        sock = socket.create_connection((host, port), timeout=left())
    except OSError as e:
        raise LighthouseStatusError(f"cannot read {url}: {e}") from e
    try:
        if scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        name = f"[{host}]" if ":" in host else host
        sock.settimeout(left())
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {name}:{port}\r\nConnection: close\r\n\r\n".encode())

        def recv(n: int) -> bytes:
            sock.settimeout(left())  # every read within the one deadline, however the server trickles
            return sock.recv(n)

        raw = read_bounded(recv, max_bytes + (1 << 16))  # the body's limit, and room for the headers
    except TooLarge:
        raise LighthouseStatusError(f"cannot read {url}: more than {max_bytes} bytes") from None
    except TimeoutError:
        raise LighthouseStatusError(f"cannot read {url}: no whole answer within {timeout:g} s") from None
    except OSError as e:
        raise LighthouseStatusError(f"cannot read {url}: {e}") from e
    finally:
        sock.close()
    return response_body(raw, max_bytes, url)


def response_body(raw: bytes, max_bytes: int, url: str) -> bytes:
    """The body of an HTTP/1.x answer that is a 200; a redirect or any other status is an error."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = lines[0].split(None, 2)
    if not sep or len(status) < 2 or not status[0].startswith(b"HTTP/1.") or not status[1].isdigit():
        raise LighthouseStatusError(f"cannot read {url}: not an HTTP answer: {raw[:80]!r}")
    code = int(status[1])
    if 300 <= code < 400:
        raise LighthouseStatusError(f"cannot read {url}: it answered {code}, a redirect (not followed)")
    if code != 200:
        raise LighthouseStatusError(f"cannot read {url}: it answered {code}")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = unchunk(body, url)
    if len(body) > max_bytes:
        raise LighthouseStatusError(f"cannot read {url}: more than {max_bytes} bytes")
    return body


def unchunk(data: bytes, url: str) -> bytes:
    out = bytearray()
    while True:
        size_line, sep, rest = data.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0].strip(), 16)
        except ValueError:
            raise LighthouseStatusError(f"cannot read {url}: a broken chunked answer") from None
        if not sep or size == 0:
            return bytes(out)
        out += rest[:size]
        data = rest[size + 2 :]
