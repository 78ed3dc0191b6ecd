"""A restarted Lighthouse remembers who was alive, so one group cannot form a quorum alone.

torchft's Lighthouse keeps its heartbeat table in memory. Restarted, it knows
no one: the first group to reconnect finds itself the only heartbeating
replica, forms a quorum alone (min_replicas 1) and commits a step that no
peer holds, while the others are still reconnecting. If that group dies
before a peer heals from it, the step is lost (found by the soak).

So the Lighthouse writes the replicas it sees heartbeating to a file while it
runs (`Memory.save`, from its status page), and a new Lighthouse, started on
a recent file, heartbeats on their behalf for `restart_grace_ms`
(`stand_in`): torchft's own rules then hold the quorum for a majority of the
remembered replicas and wait `join_timeout_ms` for the rest. A remembered
replica that is really gone stops counting heartbeat_timeout_ms after the
grace ends.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from lamplighter.rundir.contract import write_json_atomic

MAX_AGE_S = 60.0  # an older memory describes another incarnation of the job: ignored


@dataclass(frozen=True)
class Memory:
    t: float
    replicas: tuple[str, ...]

    def save(self, path: Path) -> None:
        write_json_atomic(path, {"t": self.t, "replicas": list(self.replicas)})

    @classmethod
    def load(cls, path: Path) -> Memory | None:
        try:
            raw = json.loads(path.read_text())
            return cls(float(raw["t"]), tuple(str(r) for r in raw["replicas"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def to_stand_in_for(memory: Memory | None, now: float, max_age_s: float = MAX_AGE_S) -> tuple[str, ...]:
    """The replicas a starting Lighthouse heartbeats for: those of a recent memory, none otherwise."""
    if memory is None or now - memory.t > max_age_s:
        return ()
    return memory.replicas


def beat_once(heartbeat: Callable[[str], None], replicas: tuple[str, ...]) -> int:
    """One heartbeat for each replica; returns how many went through."""
    sent = 0
    for r in replicas:
        try:
            heartbeat(r)
            sent += 1
        except Exception:  # the server is still starting: the next round will do
            pass
    return sent


def stand_in(
    heartbeat: Callable[[str], None],
    replicas: tuple[str, ...],
    grace_s: float,
    every_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Heartbeat for each replica every `every_s` until `grace_s` has passed; returns the beats sent."""
    sent = 0
    end = clock() + grace_s
    while replicas and clock() < end:
        sent += beat_once(heartbeat, replicas)
        sleep(every_s)
    return sent


def start_stand_in(
    client_factory: Callable[[], object], replicas: tuple[str, ...], grace_s: float, every_s: float = 0.1
) -> threading.Thread:
    """stand_in through torchft's LighthouseClient (made by client_factory). The first round is sent before
    this returns: the managers reconnect the moment the port listens. The rest goes on its own thread."""
    client = client_factory()

    def beat(r: str) -> None:
        client.heartbeat(r, timedelta(seconds=1))  # type: ignore[attr-defined]

    end = time.monotonic() + grace_s
    beat_once(beat, replicas)
    t = threading.Thread(
        target=lambda: stand_in(beat, replicas, max(0.0, end - time.monotonic()), every_s),
        name="stand-in",
        daemon=True,
    )
    t.start()
    return t
