"""How long a replica group's process-group setup after a quorum may take, learnt from its own setups (#16).

A member that dies just before or just after a quorum forms never joins the
new group's rendezvous; every survivor waits for it until the setup's bound.
torchft bounds the setup with pg_timeout_s (seconds, sized for a stuck
collective), so a death at the wrong instant stalls the whole job that long.
A healthy setup here takes milliseconds, so the bound follows what the group
has measured: MARGIN times its slowest recent setup, never below `floor` nor
above `ceiling` (pg_timeout_s). A setup that times out doubles the next bound
(a machine slower than measured costs a retried step, never a lost one: the
bound climbs back to the ceiling); one that succeeds resets the doubling.

A setup connects every member of the quorum to every other, so it takes
longer the more groups there are (gloo on loopback here: about 35 ms for 3
members, 70 ms for 6, 130-190 ms for 12). The floor is for a quorum of
FLOOR_MEMBERS and grows in proportion above it, and a setup measured with m
members counts as took * n / m for a quorum of n: with a fixed 300 ms floor,
12 groups' setups timed out on this machine, each failure started a new quorum
for every group, and the job trained nothing for minutes
(bench/results/stall_groups.json, `make bench-stall`).

Pure: the caller measures the setup and reports it. No torch here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta

FLOOR = timedelta(milliseconds=300)
FLOOR_MEMBERS = 3  # the floor is for a quorum this large
MARGIN = 4
HISTORY = 8


@dataclass
class RendezvousBound:
    ceiling: timedelta
    floor: timedelta = FLOOR
    # Recent setups: (seconds, members of that quorum).
    recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=HISTORY))
    failures_in_a_row: int = 0

    def __post_init__(self) -> None:
        if self.floor > self.ceiling:
            raise ValueError(f"rendezvous bound: floor {self.floor} is above ceiling {self.ceiling}")

    @classmethod
    def fixed(cls, bound: timedelta) -> RendezvousBound:
        """A bound that never moves (torchft.rendezvous_timeout_ms set to a number)."""
        return cls(ceiling=bound, floor=bound)

    def current(self, members: int = FLOOR_MEMBERS) -> timedelta:
        """The bound for a setup of a quorum of `members` groups."""
        floor = self.floor.total_seconds() * max(1.0, members / FLOOR_MEMBERS)
        scaled = (took * members / max(1, m) if members != m else took for took, m in self.recent)
        learnt = max(floor, MARGIN * max(scaled, default=0.0))
        # 2**k overflows nothing here: the ceiling is reached after a few doublings and k stops counting there.
        return min(self.ceiling, timedelta(seconds=learnt * 2**self.failures_in_a_row))

    def succeeded(self, took_s: float, members: int = FLOOR_MEMBERS) -> None:
        self.recent.append((took_s, members))
        self.failures_in_a_row = 0

    def failed(self) -> None:
        if self.current() < self.ceiling:
            self.failures_in_a_row += 1
