"""The job's own pace of progress, learned as it runs, and the hang limit it gives.

A semi-synchronous trainer (torchtitan's DiLoCo, LocalSGD) advances torchft's
step only at a sync, every N inner steps; a trainer with long steps advances
seldom too. A fixed `health.hang_timeout_s` then either calls such a group
hung between two syncs, or, set high enough to cover a sync, sees a real hang
many minutes late. So the limit follows the job: a group is hung after no
progress for

    max(hang_timeout_s, min(cap, factor x the longest interval between two
        progress marks of any group of this job))

(`health.hang_pace_factor`, `health.hang_timeout_max_s`; factor 0 keeps the
fixed timeout). Until the job has shown one interval, nothing is known of its
pace and the limit is `health.startup_timeout_s` (a DiLoCo job's first
interval is already a whole sync). An interval counts only when nothing else explains it: not the
wait from a group's start to its first progress (start-up has its own
timeout), nor one that spans a restart of any group of the job (survivors wait
out a failed peer), nor one the progress sources could not see (the
Lighthouse unreadable or restarting).

`hang_limit` is the decision, a pure function of the rule and what was
observed; `ProgressPace` only records observations.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lamplighter.configs.hang_rule import PaceRule, pace_rule

__all__ = ["PaceRule", "ProgressPace", "hang_limit", "pace_rule"]


def hang_limit(rule: PaceRule, longest_s: float) -> tuple[float, str]:
    """The silence after which a group that made progress is hung, and why that long."""
    if rule.factor <= 0:
        return rule.hang_timeout_s, f"hang_timeout_s {rule.hang_timeout_s:g}"
    if longest_s <= 0:
        if rule.learning_s is not None and rule.learning_s > rule.hang_timeout_s:
            return rule.learning_s, f"startup_timeout_s {rule.learning_s:g}: no progress interval seen in this job yet"
        return rule.hang_timeout_s, f"hang_timeout_s {rule.hang_timeout_s:g}"
    learned = rule.factor * longest_s
    if rule.cap_s is not None and learned > rule.cap_s:
        learned = rule.cap_s
        why = f"hang_timeout_max_s {rule.cap_s:g}, below {rule.factor:g} x the longest interval {longest_s:.1f} s"
    else:
        why = f"{rule.factor:g} x the longest progress interval {longest_s:.1f} s"
    if learned <= rule.hang_timeout_s:
        return rule.hang_timeout_s, f"hang_timeout_s {rule.hang_timeout_s:g}"
    return learned, why


@dataclass
class ProgressPace:
    """The longest clean interval between two progress marks of one group attempt, over the whole job."""

    longest_s: float = 0.0
    _last: dict[tuple[int, int], float] = field(default_factory=dict)

    def saw(self, group: int, attempt: int, t: float, *, excused_until: float, starts: Iterable[float]) -> None:
        """The attempt's latest progress is at `t` (seen again each cycle); `starts`: every attempt's start time."""
        prev = self._last.get((group, attempt))
        if prev is not None and t <= prev:
            return
        self._last[(group, attempt)] = t
        if prev is None or excused_until > prev:
            return  # its first progress (start-up), or silence the sources could not see
        if any(prev < s < t for s in starts):
            return  # a group (re)started meanwhile: the wait was for a failed peer, not the job's pace
        self.longest_s = max(self.longest_s, t - prev)
