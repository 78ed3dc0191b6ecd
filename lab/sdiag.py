"""slurmctld's own count of the RPCs it served, from `sdiag`: what the scale lab holds lamplighter's load to (#31).

`sdiag -r` zeroes the counters; `sdiag` then prints, since that moment, every RPC
type slurmctld served with its count and times, and the same per user. A rate is
a count over the seconds between "Data since" and "sdiag output at", both of which
sdiag prints as epoch seconds in parentheses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_EPOCH = re.compile(r"\((\d+)\)\s*$")
_RPC = re.compile(r"^\s*(\S+)\s*\(\s*(\d+)\)\s+count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)")
BY_TYPE = "Remote Procedure Call statistics by message type"
BY_USER = "Remote Procedure Call statistics by user"
OWN = "REQUEST_STATS_INFO"  # sdiag's own RPC


@dataclass(frozen=True)
class RpcStat:
    name: str  # REQUEST_JOB_INFO, or a user name
    id: int  # the message type's number, or the uid
    count: int
    ave_us: int
    total_us: int


@dataclass(frozen=True)
class Sdiag:
    at: int  # "sdiag output at", epoch seconds
    since: int  # "Data since": the last reset (sdiag -r) or slurmctld's start
    by_type: dict[str, RpcStat]
    by_user: dict[str, RpcStat]

    @property
    def seconds(self) -> int:
        return self.at - self.since

    def total(self) -> int:
        return sum(s.count for s in self.by_type.values())

    def per_second(self, exclude: tuple[str, ...] = (OWN,)) -> dict[str, float]:
        """Each RPC type's rate over the counting window (at least one second), sdiag's own calls aside."""
        span = max(1, self.seconds)
        return {name: s.count / span for name, s in self.by_type.items() if name not in exclude}


def parse_sdiag(text: str) -> Sdiag:
    """`sdiag`'s output; ValueError if the times or the per-type section are missing."""
    at = since = None
    section: dict[str, RpcStat] | None = None
    by_type: dict[str, RpcStat] = {}
    by_user: dict[str, RpcStat] = {}
    seen_type = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("sdiag output at") and (m := _EPOCH.search(stripped)):
            at = int(m.group(1))
        elif stripped.startswith("Data since") and (m := _EPOCH.search(stripped)):
            since = int(m.group(1))
        elif stripped.startswith(BY_TYPE):
            section, seen_type = by_type, True
        elif stripped.startswith(BY_USER):
            section = by_user
        elif not stripped:
            section = None  # each list ends with a blank line
        elif section is not None and (m := _RPC.match(line)):
            name, num, count, ave, total = m.groups()
            section[name] = RpcStat(name, int(num), int(count), int(ave), int(total))
    if at is None or since is None or not seen_type:
        raise ValueError("not sdiag output: no 'sdiag output at', 'Data since' or per-type RPC section")
    return Sdiag(at, since, by_type, by_user)
