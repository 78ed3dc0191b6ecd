"""A fixed process table for the checks' tests (the product's tables are read from /proc or a loop's records)."""

from __future__ import annotations

from lamplighter.system.trainer_proc import TrainerProc


class StaticTable:
    """The trainers a check watches, fixed."""

    def __init__(self, procs: list[TrainerProc]) -> None:
        self._procs = list(procs)

    def trainers(self) -> list[TrainerProc]:
        return list(self._procs)
