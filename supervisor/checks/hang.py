"""Hang check: a trainer that wrote no step heartbeat for longer than the timeout."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lamplighter.supervisor.observations import Hung
from lamplighter.supervisor.trainer_proc import ProcessTable
from lamplighter.trainer.contract import RunPaths


@dataclass(frozen=True)
class Beat:
    step: int
    time: float
    pid: int


class HeartbeatFiles:
    """Reads the trainers' heartbeat files (trainer/contract.py) under a run directory."""

    def __init__(self, run_dir: Path) -> None:
        self._paths = RunPaths(Path(run_dir))

    def last_beat(self, group: int, rank: int) -> Beat | None:
        try:
            obj = json.loads(self._paths.heartbeat(group, rank).read_text())
            return Beat(step=int(obj["step"]), time=float(obj["time"]), pid=int(obj["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


class HangCheck:
    """Hung(...) for every watched trainer silent longer than `timeout_s`.

    A process's silence counts from its last heartbeat, or from its start if it
    has not beaten yet. Until it has finished a step (beats with step 0 or
    none) it may be silent `startup_grace_s` longer: importing torch, joining
    the quorum and receiving the weights take seconds on a busy node. A beat
    written by another PID (an earlier attempt) does not count. Silence
    before `excused_since()` does not count either: local mode passes the
    Lighthouse's last start, since no group can step while it is down.
    """

    def __init__(
        self,
        table: ProcessTable,
        heartbeats: HeartbeatFiles,
        timeout_s: float,
        startup_grace_s: float = 0.0,
        excused_since: Callable[[], float] | None = None,
    ) -> None:
        self._table = table
        self._beats = heartbeats
        self._timeout = timeout_s
        self._grace = startup_grace_s
        self._excused = excused_since

    def observe(self, now: float) -> list[Hung]:
        out: list[Hung] = []
        for p in self._table.trainers():
            beat = self._beats.last_beat(p.group, p.rank)
            if beat is not None and beat.pid != p.pid:
                beat = None
            last = max(p.started_at, beat.time) if beat else p.started_at
            if self._excused is not None:
                last = max(last, self._excused())
            silent = now - last
            limit = self._timeout if beat is not None and beat.step > 0 else self._timeout + self._grace
            if silent > limit:
                out.append(
                    Hung(
                        group=p.group,
                        rank=p.rank,
                        attempt=p.attempt,
                        pid=p.pid,
                        last_step=beat.step if beat else None,
                        silent_s=silent,
                        timeout_s=limit,
                    )
                )
        return out
