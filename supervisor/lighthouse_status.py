"""Read the torchft Lighthouse's quorum from its `/status` page.

This torchft version serves no JSON: `/status` is an HTML fragment (quorum id,
the previous quorum's members with their step and addresses, and the
heartbeats with their age). The parser works on that fragment's text and the
classes torchft puts on members (`recovering`) and heartbeats (`old`), and is
tested on pages recorded from the real Lighthouse. A page it cannot read is an
error that says so, never an empty quorum.
"""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser


class LighthouseStatusError(Exception):
    """The Lighthouse could not be reached, or its page was not what this parser knows."""


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
        raise LighthouseStatusError(f"not a duration: {text!r}")
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
        raise LighthouseStatusError(f"member without '{label}:' in {text.strip()!r}")
    return m.group(1)


def parse_status(html: str) -> LighthouseStatus:
    p = _Splitter()
    p.feed(html)
    p.close()
    loose = "".join(p.loose)
    qid = re.search(r"Current quorum_id:\s*(-?\d+)", loose)
    if not qid:
        raise LighthouseStatusError("no 'Current quorum_id' on the page: not a torchft Lighthouse /status page?")
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
                raise LighthouseStatusError(f"heartbeat line not understood: {text.strip()!r}")
            heartbeats.append(Heartbeat(m.group(1), parse_duration(m.group(2)), "old" in classes))
    return LighthouseStatus(
        quorum_id=int(qid.group(1)),
        next_quorum=nxt.group(1).strip() if nxt else "",
        previous_quorum_id=int(prev.group(1)) if prev else None,
        quorum_age_s=parse_duration(age.group(1)) if age else None,
        members=members,
        heartbeats=heartbeats,
    )


def fetch_status(address: str, timeout: float = 2.0) -> LighthouseStatus:
    """GET <address>/status from a Lighthouse (address like http://host:29510)."""
    url = address.rstrip("/") + "/status"
    if not url.startswith(("http://", "https://")):
        raise LighthouseStatusError(f"Lighthouse address must start with http:// : {address!r}")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            html = resp.read().decode("utf-8", "replace")
    except OSError as e:
        raise LighthouseStatusError(f"cannot read {url}: {e}") from e
    return parse_status(html)
