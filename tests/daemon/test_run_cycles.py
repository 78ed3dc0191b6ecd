"""The daemon's loop: a cycle every poll interval, and at once when woken (a trainer's exit, a stop)."""

from __future__ import annotations

import threading

from lamplighter.commands.supervise import run_cycles

BOUND_S = 30.0  # a bound on a wait for a thread, far beyond what it needs: a hang fails, never a slow machine


def test_a_wake_starts_the_next_cycle_at_once_and_a_stop_ends_the_loop_at_once() -> None:
    """With an hour's interval, the second cycle can only come from the wake, and the loop's end from the stop."""
    stop, wake = threading.Event(), threading.Event()
    cycled = [threading.Event() for _ in range(3)]
    count = 0

    def cycle() -> None:
        nonlocal count
        cycled[min(count, 2)].set()
        count += 1

    loop = threading.Thread(
        target=run_cycles, args=(cycle, 3600.0, stop, lambda: None, lambda: None, None, wake), daemon=True
    )
    loop.start()
    assert cycled[0].wait(BOUND_S)
    wake.set()  # as the exit watcher does from its thread
    assert cycled[1].wait(BOUND_S)
    stop.set()
    wake.set()  # as the signal handler does
    loop.join(BOUND_S)
    assert not loop.is_alive() and count == 2


def test_next_in_brings_the_next_cycle_sooner_than_the_interval() -> None:
    stop = threading.Event()
    asked: list[float] = []

    def next_in(interval: float) -> float:
        asked.append(interval)
        return 0.0

    def cycle() -> None:
        if len(asked) == 3:
            stop.set()

    loop = threading.Thread(
        target=run_cycles, args=(cycle, 3600.0, stop, lambda: None, lambda: None, None, None, next_in), daemon=True
    )
    loop.start()
    loop.join(BOUND_S)
    # Three cycles within the bound, with an hour's interval: only next_in's 0 could bring them.
    assert not loop.is_alive() and len(asked) >= 3 and set(asked) == {3600.0}
