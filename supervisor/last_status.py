"""The loop's status as of its last complete cycle, for readers on other threads.

The status socket answers from its own thread. Reading the loop itself there
could see a cycle half-way: trainers adopted but their job's watch not made
yet (a CI run saw exactly that). So the cycle publishes a finished copy and
readers only ever see whole ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class LastStatus:
    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self._read = read
        self._value = read()  # before the first cycle: nothing runs concurrently yet

    def publish(self, **extra: Any) -> dict[str, Any]:
        """Called by the cycling thread between cycles; the swap of one reference is atomic. `extra`: what the
        cycle measured of itself (its duration)."""
        self._value = {**self._read(), **extra}
        return self._value

    def get(self) -> dict[str, Any]:
        return self._value
