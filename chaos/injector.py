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
    that has no live peer, which is the fallback checkpoint's business), and
    the job's warm standbys all ready again (a fault on a job back at full
    strength, spares included); a Lighthouse that has seen a commit since it
    last started.

The plan is taken as the run's clock reaches it: a random plan has no end
(but max=N), and its next fault is drawn only when the one before has fired,
so a run never holds faults planned past its end. An event of a schedule may
name its own mode (a test that wants its first faults to overlap and its later
ones to wait for a healed job).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from lamplighter.chaos.plan import UNTARGETED_KINDS, PlannedFault, pick_group


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
    spares_ready: bool = True  # every warm standby the job keeps is there and past its imports


class ChaosInjector:
    """Takes planned faults in order as the run's clock reaches them (a random plan is drawn no further)."""

    def __init__(self, planned: Iterable[PlannedFault], seed: int, mode: str = "gentle") -> None:
        if mode not in ("exact", "gentle"):
            raise ValueError(f"chaos mode {mode!r}: exact or gentle")
        self._source = iter(planned)
        self._drawn: deque[PlannedFault] = deque()  # drawn from the plan, not fired yet
        self._seed = seed
        self.mode = mode
        self._next = 0  # faults fired (struck or missed)
        self._stopped = False

    @property
    def fired(self) -> int:
        return self._next

    @property
    def done(self) -> bool:
        """No fault left to fire: the plan is over, or the run stopped it."""
        return self._peek() is None

    def stop(self) -> None:
        """Fire nothing more (the job ended, or the caller has the faults it wanted)."""
        self._stopped = True

    def _peek(self) -> PlannedFault | None:
        return None if self._stopped else self._first()

    def _first(self) -> PlannedFault | None:
        if not self._drawn:
            f = next(self._source, None)
            if f is None:
                return None
            self._drawn.append(f)
        return self._drawn[0]

    def next_at_s(self) -> float | None:
        f = self._peek()
        return None if f is None else f.at_s

    def unfired_by(self, elapsed_s: float) -> int:
        """Faults planned at or before `elapsed_s` that were not fired (drawing the plan that far, no further)."""
        if self._first() is None:
            return 0
        while self._drawn[-1].at_s <= elapsed_s:
            f = next(self._source, None)
            if f is None:
                break
            self._drawn.append(f)
        return sum(1 for f in self._drawn if f.at_s <= elapsed_s)

    def next_mode(self) -> str | None:
        """The mode the next fault fires in: its own, else the schedule's (None: no fault left)."""
        f = self._peek()
        return None if f is None else f.mode or self.mode

    def due(self, elapsed_s: float, seen: Targets) -> Shot | None:
        """The next fault if it is due (and, gentle, has a healthy target now); at most one per call."""
        f = self._peek()
        if f is None or elapsed_s < f.at_s:
            return None
        shot = self._exact(f, seen) if (f.mode or self.mode) == "exact" else self._gentle(f, seen)
        if shot is not None:
            self._drawn.popleft()
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
        if len(seen.healthy) < 2 or not seen.spares_ready:
            return None
        if f.group is not None:
            return Shot(f, self._next, f.group) if f.group in seen.healthy else None
        return Shot(f, self._next, pick_group(seen.healthy, self._next, self._seed))
