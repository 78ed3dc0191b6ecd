"""Whether a submitted job is over, seen from outside: what chaos and its recovery watches stop on.

The rule is the Lighthouse job's own (release.py's `decide`): the job is over
once every group job has been out of the queue (ended, or purged by Slurm)
for a grace, because a group job may end FAILED for a moment before its node
daemon requeues it. A Slurm error counts as "still queued" (a controller
restart never ends a job). While every group job is out of the queue but
the grace has not passed, the job is `ending`: nothing can be struck then.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.submit.release import GRACE_S, decide
from lamplighter.slurm.submit.submission import Submission, job_states

LOOK_EVERY_S = 1.0  # one query per group job a second: well under what the chaos loop itself asks


class JobEnd:
    """Looks at the group jobs' states at most every `every_s`; `over` once the end is confirmed."""

    def __init__(
        self,
        sub: Submission,
        api: SlurmApi,
        *,
        grace_s: float = GRACE_S,
        every_s: float = LOOK_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sub, self._api, self._grace, self._every, self._clock = sub, api, grace_s, every_s, clock
        self._looked_at: float | None = None
        self._clear_since: float | None = None
        self.over = False
        self.reason = "not looked at yet"

    @property
    def ending(self) -> bool:
        """Every group job is out of the queue now (over, or being confirmed)."""
        return self._clear_since is not None

    def look(self) -> bool:
        """Ask Slurm again if `every_s` has passed; True once the job is over."""
        now = self._clock()
        if self.over or (self._looked_at is not None and now - self._looked_at < self._every):
            return self.over
        self._looked_at = now
        states = job_states(self._api, self._sub.groups.values())
        d = decide(now, states, self._clear_since, self._grace)
        self._clear_since, self.over, self.reason = d.clear_since, d.release, d.reason
        return self.over
