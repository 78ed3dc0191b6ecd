"""The learning bound on a process group's setup after a quorum (#16: survivors' stall). Pure: setups are
reported to it, nothing is timed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lamplighter.trainer.rendezvous_bound import FLOOR, HISTORY, MARGIN, RendezvousBound

CEILING = timedelta(seconds=3)


def test_before_any_setup_the_bound_is_the_floor_not_the_collectives_timeout() -> None:
    assert RendezvousBound(ceiling=CEILING).current() == FLOOR


def test_fast_setups_keep_the_floor_and_a_slow_one_raises_the_bound_by_the_margin() -> None:
    b = RendezvousBound(ceiling=CEILING)
    for _ in range(3):
        b.succeeded(0.004)
    assert b.current() == FLOOR
    b.succeeded(0.2)
    assert b.current() == timedelta(seconds=MARGIN * 0.2)


def test_a_slow_setup_is_forgotten_after_the_history() -> None:
    b = RendezvousBound(ceiling=CEILING)
    b.succeeded(0.5)
    for _ in range(HISTORY - 1):
        b.succeeded(0.01)
    assert b.current() == timedelta(seconds=2.0)
    b.succeeded(0.01)
    assert b.current() == FLOOR


def test_each_timeout_doubles_the_bound_up_to_the_ceiling_and_a_success_resets_the_doubling() -> None:
    b = RendezvousBound(ceiling=CEILING)
    seen = []
    for _ in range(6):
        seen.append(b.current())
        b.failed()
    assert seen == [FLOOR * 2**k for k in range(4)] + [CEILING, CEILING]
    b.succeeded(0.01)
    assert b.current() == FLOOR


def test_a_fixed_bound_never_moves() -> None:
    b = RendezvousBound.fixed(timedelta(milliseconds=150))
    b.failed()
    b.succeeded(1.0)
    assert b.current() == timedelta(milliseconds=150)


def test_a_floor_above_the_ceiling_is_refused_with_both_values() -> None:
    with pytest.raises(ValueError, match="floor 0:00:05 is above ceiling 0:00:03"):
        RendezvousBound(ceiling=CEILING, floor=timedelta(seconds=5))


def test_a_larger_quorums_setup_gets_a_floor_and_a_learnt_bound_in_proportion() -> None:
    # Every member connects to every other: 12 groups' setups timed out against the floor for 3 (make bench-stall).
    b = RendezvousBound(ceiling=CEILING)
    assert b.current(12) == FLOOR * 4 and b.current(2) == FLOOR
    b.succeeded(0.1, members=3)
    assert b.current(3) == timedelta(seconds=MARGIN * 0.1)
    assert b.current(12) == timedelta(seconds=MARGIN * 0.4)
    b.succeeded(0.9, members=12)  # measured at 12: counts as 0.225 s for 3
    assert b.current(3) == timedelta(seconds=MARGIN * 0.225)
    assert b.current(24) == CEILING  # never above the collectives' timeout


def test_a_fixed_bound_never_moves_whatever_the_quorum() -> None:
    b = RendezvousBound.fixed(timedelta(milliseconds=150))
    assert b.current(12) == b.current(2) == timedelta(milliseconds=150)
