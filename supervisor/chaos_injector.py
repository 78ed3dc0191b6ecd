"""When each planned fault fires and whom it hits: pure selection, the run loop does the harm.

A fault fires once its time (seconds after training started) has come and it
can hit something healthy: a group that committed a step since its current
attempt started, with at least one other healthy group left as the live peer
that heals it (torchft cannot heal a group that has no live peer, which is
the fallback checkpoint's business, not chaos's); a Lighthouse that has seen
a commit since it last started. Until then the fault waits, so every fault
hits a running job and its recovery can be measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from lamplighter.supervisor.chaos import PlannedFault, pick_group


@dataclass(frozen=True)
class Shot:
    """A fault to inject now, at `group` (None: the Lighthouse)."""

    fault: PlannedFault
    index: int
    group: int | None


class ChaosInjector:
    def __init__(self, planned: list[PlannedFault], seed: int) -> None:
        self._planned = planned
        self._seed = seed
        self._next = 0

    @property
    def remaining(self) -> int:
        return len(self._planned) - self._next

    def next_at_s(self) -> float | None:
        return self._planned[self._next].at_s if self._next < len(self._planned) else None

    def due(self, elapsed_s: float, healthy: list[int], lighthouse_healthy: bool) -> Shot | None:
        """The next fault if it is due and has a healthy target now; at most one per call."""
        if self._next >= len(self._planned):
            return None
        f = self._planned[self._next]
        if elapsed_s < f.at_s:
            return None
        if f.kind == "lighthouse-kill":
            if not lighthouse_healthy:
                return None
            shot = Shot(f, self._next, None)
        else:
            if len(healthy) < 2:
                return None
            if f.group is not None:
                if f.group not in healthy:
                    return None
                target = f.group
            else:
                target = pick_group(healthy, self._next, self._seed)
            shot = Shot(f, self._next, target)
        self._next += 1
        return shot
