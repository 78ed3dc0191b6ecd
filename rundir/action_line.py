"""One structured JSON line per action the daemon takes (or refuses to take).

Each line says when, on which node, what was done to what, why, and the
observation that led to it, so an operator can audit every kill, drain and
requeue from the log alone. Lines go to a sink (a file opened for append, the
journal of systemd through stderr, or a test's list) and the time is passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lamplighter.rundir.actions import format_action

log = logging.getLogger(__name__)


@dataclass
class ActionLog:
    node: str
    sink: Callable[[str], None]
    on_action: Callable[[str, str], None] | None = None  # (action, outcome) of every line: the metrics

    def write(
        self, now: float, action: str, target: str, reason: str, observation: dict[str, Any], **extra: Any
    ) -> str:
        line = format_action(now, self.node, action, target, reason, observation, **extra)
        self.sink(line)
        if self.on_action is not None:
            self.on_action(action, str(extra.get("outcome", "")))
        return line


def logging_sink(logger: logging.Logger) -> Callable[[str], None]:
    """A sink through logging (stderr under systemd ends up in the journal), prefixed to be grep-able."""

    def write(line: str) -> None:
        logger.info("action %s", line)

    return write
