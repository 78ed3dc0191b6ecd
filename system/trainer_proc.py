"""Which trainer processes the checks watch: the one table they all read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class TrainerProc:
    """One running trainer process of one attempt of one replica group."""

    group: int
    rank: int
    attempt: int
    pid: int
    started_at: float  # epoch seconds


class ProcessTable(Protocol):
    def trainers(self) -> list[TrainerProc]:
        """The trainer processes currently meant to be running."""
        ...
