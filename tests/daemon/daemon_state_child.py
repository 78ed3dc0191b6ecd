"""Child process for the crash tests: writes daemon state until it is SIGKILLed.

Run as a script (never imported by pytest). Every line it prints is printed
after the change it names was acknowledged (the call returned), so the parent
knows what must survive a kill.
"""

from __future__ import annotations

import sys
import time
from itertools import count
from pathlib import Path

from lamplighter.supervisor.state_store import DaemonState


def churn(state_dir: Path) -> None:
    state = DaemonState.load(state_dir, compact_every=7)
    for i in count():
        group = f"g{i % 3}"
        a = state.record_intent(float(i), "requeue", f"job{i % 3}", "test churn", {"i": i}, restart_group=group)
        print(f"intent {a.id} {group}", flush=True)
        if i % 2 == 0:
            state.record_done(float(i), a.id, "ok")
            print(f"done {a.id}", flush=True)
        state.bump_restart(float(i), group)
        print(f"bump {group}", flush=True)
        state.set_baseline(float(i), f"gpu{i % 2}", {"ecc": i})
        print(f"baseline gpu{i % 2} {i}", flush=True)


def requeue(state_dir: Path, world: Path, stop_after: str) -> None:
    """One requeue, journaled; stops (waits to be killed) after `stop_after`: "intent" or "acted"."""
    state = DaemonState.load(state_dir)
    restarts = int(world.read_text())
    a = state.record_intent(1.0, "requeue", "4242", "trainer died", {"exit": -9}, {"restarts": restarts}, "job/1")
    if stop_after == "acted":
        world.write_text(str(restarts + 1))  # stands in for `scontrol requeue`: Slurm's Restarts goes up
    print(f"{stop_after} {a.id}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    if sys.argv[1] == "churn":
        churn(Path(sys.argv[2]))
    else:
        requeue(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
