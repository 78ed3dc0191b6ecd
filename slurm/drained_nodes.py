"""The nodes lamplighter took out of service: drained or down with a reason starting `lamplighter: `.

Pure: takes the parsed `scontrol show nodes` and the time. Slurm stamps a
node's reason with who set it and when (`Reason=... [root@2026-11-23T10:11:12]`,
local time); the age is counted from that stamp.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lamplighter.configs.slurm_names import REASON_PREFIX
from lamplighter.slurm.parsers import NodeInfo


@dataclass(frozen=True)
class OutNode:
    """A node that takes no new jobs, and why."""

    name: str
    state: str
    reason: str | None
    by_lamplighter: bool
    since: float | None  # epoch seconds of the reason's stamp
    age_s: float | None

    def to_json(self) -> dict[str, object]:
        return {
            "node": self.name,
            "state": self.state,
            "reason": self.reason,
            "by_lamplighter": self.by_lamplighter,
            "since": self.since,
            "age_s": None if self.age_s is None else round(self.age_s, 1),
        }


def reason_time(stamp: str | None) -> float | None:
    """Slurm's `2026-11-23T10:11:12` (local time) as epoch seconds; None if absent or unreadable."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def by_lamplighter(node: NodeInfo) -> bool:
    return (node.reason or "").startswith(REASON_PREFIX)


def out_of_service(nodes: list[NodeInfo], now: float, only_lamplighter: bool = False) -> list[OutNode]:
    """Drained, draining, down or unregistered nodes (only those lamplighter took out, if asked)."""
    out = []
    for n in nodes:
        if not (n.is_drained or n.is_down or not n.registered):
            continue
        ours = by_lamplighter(n)
        if only_lamplighter and not ours:
            continue
        since = reason_time(n.reason_time)
        out.append(OutNode(n.name, n.state, n.reason, ours, since, None if since is None else max(0.0, now - since)))
    return out


def format_age(age_s: float | None) -> str:
    if age_s is None:
        return "-"
    if age_s < 120:
        return f"{age_s:.0f}s"
    if age_s < 7200:
        return f"{age_s / 60:.0f}m"
    if age_s < 172800:
        return f"{age_s / 3600:.1f}h"
    return f"{age_s / 86400:.1f}d"
