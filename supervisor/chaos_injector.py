"""When each planned fault fires and whom it hits: pure selection, the run loop does the harm.

Two modes (ChaosConfig.mode):

exact (a schedule's default)
    A fault fires at its time, whatever state its target is in: a group still
    restarting or healing is hit as it is, two faults may overlap. A fault
    without a group hits one of the groups that have a process now. A group
    with no process at all (given up, finished) cannot be hit: the shot says
    so, and the run records the fault as missed rather than moving it.
gentle (random draws' default)
    A fault waits until it can hit something healthy: a group that committed
    a step since its current attempt started, with at least one other healthy
    group left as the live peer that heals it (torchft cannot heal a group
    that has no live peer, which is the fallback checkpoint's business); a
    Lighthouse that has seen a commit since it last started.
"""

from __future__ import annotations

from dataclasses import dataclass

from lamplighter.supervisor.chaos import UNTARGETED_KINDS, PlannedFault, pick_group


@dataclass(frozen=True)
class Shot:
    """A fault to inject now, at `group` (None: the Lighthouse or the controller); `missed` says why it can hit nothing."""

    fault: PlannedFault
    index: int
    group: int | None
    missed: str | None = None


@dataclass(frozen=True)
class Targets:
    """What the run loop sees this turn."""

    healthy: list[int]  # committed since their current attempt started
    present: list[int]  # have a process of their current attempt (starting, healing, hung or healthy)
    lighthouse_healthy: bool  # running and has seen a commit since it last started


class ChaosInjector:
    def __init__(self, planned: list[PlannedFault], seed: int, mode: str = "gentle") -> None:
        if mode not in ("exact", "gentle"):
            raise ValueError(f"chaos mode {mode!r}: exact or gentle")
        self._planned = planned
        self._seed = seed
        self.mode = mode
        self._next = 0

    @property
    def remaining(self) -> int:
        return len(self._planned) - self._next

    def next_at_s(self) -> float | None:
        return self._planned[self._next].at_s if self._next < len(self._planned) else None

    def due(self, elapsed_s: float, seen: Targets) -> Shot | None:
        """The next fault if it is due (and, gentle, has a healthy target now); at most one per call."""
        if self._next >= len(self._planned):
            return None
        f = self._planned[self._next]
        if elapsed_s < f.at_s:
            return None
        shot = self._exact(f, seen) if self.mode == "exact" else self._gentle(f, seen)
        if shot is not None:
            self._next += 1
        return shot

    def _exact(self, f: PlannedFault, seen: Targets) -> Shot:
        i = self._next
        if f.kind in UNTARGETED_KINDS:
            return Shot(f, i, None)
        if f.group is not None:
            missed = None if f.group in seen.present else f"group {f.group} has no process"
            return Shot(f, i, f.group, missed)
        if not seen.present:
            return Shot(f, i, None, "no group has a process")
        return Shot(f, i, pick_group(seen.present, i, self._seed))

    def _gentle(self, f: PlannedFault, seen: Targets) -> Shot | None:
        if f.kind in UNTARGETED_KINDS:
            return Shot(f, self._next, None) if seen.lighthouse_healthy else None
        if len(seen.healthy) < 2:
            return None
        if f.group is not None:
            return Shot(f, self._next, f.group) if f.group in seen.healthy else None
        return Shot(f, self._next, pick_group(seen.healthy, self._next, self._seed))
