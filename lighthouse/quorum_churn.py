"""Quorums that keep forming without groups that are alive: the sign of steps longer than the join timeout.

torchft's Lighthouse (src/lighthouse.rs) puts a member a quorum left out back among the participants,
with the current time as its join time, the moment that quorum is sent. With steps longer than
`lighthouse.join_timeout_ms`, by the next round it has waited a whole step, the join timeout (counted
from the earliest join) has passed, and the quorum is cut as soon as more than half of the
heartbeating groups are in: the late half is left out again, every step, for good (measured with 16
and 64 groups: quorums of 9 and 33, a new quorum every step, each group committing every other step;
bench/README.md, "torchft's Lighthouse at scale"). Nothing fails, so nothing else says so.

A restart changes the quorum at most twice (the group leaves, the group is back); a quorum that
changes CHANGES times in a row, each time without some group that heartbeats, is this.
"""

from __future__ import annotations

from dataclasses import dataclass

from lamplighter.lighthouse.status import LighthouseStatus

CHANGES = 4
REPEAT_S = 600.0  # say it again at most this often: it goes on until someone changes the setting


@dataclass
class QuorumChurn:
    join_timeout_ms: int | None  # the Lighthouse's; None: torchft's default
    last_quorum: int | None = None
    streak: int = 0
    warned_at: float | None = None

    def observe(self, now: float, status: LighthouseStatus) -> str | None:
        """A warning to log when the quorums churn without live groups (module doc), else None."""
        if status.quorum_id == self.last_quorum:
            return None
        first = self.last_quorum is None
        self.last_quorum = status.quorum_id
        missing = status.live_groups() - {m.group for m in status.members}
        self.streak = 0 if first or not missing else self.streak + 1
        if self.streak < CHANGES or (self.warned_at is not None and now - self.warned_at < REPEAT_S):
            return None
        self.warned_at = now
        timeout = "torchft's default" if self.join_timeout_ms is None else f"{self.join_timeout_ms} ms"
        return (
            f"the last {self.streak} quorums each formed without groups that are alive (quorum {status.quorum_id} "
            f"leaves out {len(missing)}: {', '.join(sorted(missing))}). "
            f"Steps longer than lighthouse.join_timeout_ms ({timeout}) do this: "
            "torchft cuts each quorum once just over half the groups have joined and leaves the rest out again "
            "at every step. Set lighthouse.join_timeout_ms above the longest step."
        )
