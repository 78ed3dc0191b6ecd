"""One structured JSON line per action the daemon takes (or refuses to take).

Each line says when, on which node, what was done to what, why, and the
observation that led to it, so an operator can audit every kill, drain and
requeue from the log alone. Lines go to a sink (a file opened for append, the
journal of systemd through stderr, or a test's list) and the time is passed in.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def format_action(
    now: float, node: str, action: str, target: str, reason: str, observation: dict[str, Any], **extra: Any
) -> str:
    """The line for one action: a JSON object with fixed keys first, without a trailing newline."""
    record: dict[str, Any] = {
        "time": datetime.fromtimestamp(now, tz=UTC).isoformat(timespec="milliseconds"),
        "ts": now,
        "node": node,
        "action": action,
        "target": target,
        "reason": reason,
        "observation": observation,
    }
    for k, v in extra.items():
        if k in record:
            raise ValueError(f"action log: extra field {k!r} would overwrite a fixed one")
        record[k] = v
    # default=str: an observation holding a Path or an enum still logs instead of raising mid-action.
    return json.dumps(record, default=str, separators=(",", ":"))


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


class FileSink:
    """Appends whole lines to a file, one write() each, so concurrent writers never interleave within a line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)

    def __call__(self, line: str) -> None:
        try:
            os.write(self._fd, (line + "\n").encode())
        except OSError as e:
            raise OSError(e.errno, f"action log {self.path}: cannot write: {e.strerror}") from e

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def logging_sink(logger: logging.Logger) -> Callable[[str], None]:
    """A sink through logging (stderr under systemd ends up in the journal), prefixed to be grep-able."""

    def write(line: str) -> None:
        logger.info("action %s", line)

    return write
