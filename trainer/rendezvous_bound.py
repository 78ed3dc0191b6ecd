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

Pure: the caller measures the setup and reports it. No torch here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta

FLOOR = timedelta(milliseconds=300)
MARGIN = 4
HISTORY = 8


@dataclass
class RendezvousBound:
    ceiling: timedelta
    floor: timedelta = FLOOR
    recent_s: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY))
    failures_in_a_row: int = 0

    def __post_init__(self) -> None:
        if self.floor > self.ceiling:
            raise ValueError(f"rendezvous bound: floor {self.floor} is above ceiling {self.ceiling}")

    @classmethod
    def fixed(cls, bound: timedelta) -> RendezvousBound:
        """A bound that never moves (torchft.rendezvous_timeout_ms set to a number)."""
        return cls(ceiling=bound, floor=bound)

    def current(self) -> timedelta:
        learnt = max(self.floor.total_seconds(), MARGIN * max(self.recent_s, default=0.0))
        # 2**k overflows nothing here: the ceiling is reached after a few doublings and k stops counting there.
        return min(self.ceiling, timedelta(seconds=learnt * 2**self.failures_in_a_row))

    def succeeded(self, took_s: float) -> None:
        self.recent_s.append(took_s)
        self.failures_in_a_row = 0

    def failed(self) -> None:
        if self.current() < self.ceiling:
            self.failures_in_a_row += 1
