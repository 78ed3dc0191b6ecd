"""The hang rule a job's health settings give: the fixed timeout, or the limit learned from the job's pace.

The check itself (learning, judging) is supervisor/checks/progress_pace.py; this is the rule, so that
`lamplighter validate` can say what the check will do.
"""

from __future__ import annotations

from dataclasses import dataclass

from lamplighter.configs.schema import HealthConfig


@dataclass(frozen=True)
class PaceRule:
    hang_timeout_s: float
    factor: float = 0.0  # 0: the fixed hang timeout, nothing learned
    cap_s: float | None = None  # the limit never exceeds this (None: no cap beyond the factor's)
    learning_s: float | None = None  # the limit before any interval was seen (None: hang_timeout_s)

    def describe(self) -> str:
        """What the hang check will do, in one sentence (`lamplighter validate`)."""
        if self.factor <= 0:
            return f"hung after no progress for {self.hang_timeout_s:g} s"
        cap = "" if self.cap_s is None else f", at most {self.cap_s:g} s"
        first = "" if self.learning_s is None else f"; {self.learning_s:g} s until one interval was seen"
        return (
            f"hung after no progress for max({self.hang_timeout_s:g} s, {self.factor:g} x the longest interval "
            f"between two progress marks seen in this job{cap}){first}"
        )


def pace_rule(h: HealthConfig) -> PaceRule:
    """The rule a job's health settings give (the cap defaults to the start-up timeout)."""
    cap = h.startup_timeout_s if h.hang_timeout_max_s is None else h.hang_timeout_max_s
    return PaceRule(h.hang_timeout_s, factor=h.hang_pace_factor, cap_s=cap, learning_s=h.startup_timeout_s)
