"""Gentle faults wait for a healthy target and a live peer; exact faults fire on time, whatever the state."""

from __future__ import annotations

import pytest

from lamplighter.configs.schema import ChaosConfig
from lamplighter.supervisor.chaos import PlannedFault
from lamplighter.supervisor.chaos_injector import ChaosInjector, Targets


def seen(healthy: list[int], lighthouse: bool = True, present: list[int] | None = None) -> Targets:
    return Targets(healthy=healthy, present=sorted(set(healthy) | set(present or [])), lighthouse_healthy=lighthouse)


PLAN = [PlannedFault(5.0, "kill", 1), PlannedFault(6.0, "hang", None), PlannedFault(7.0, "lighthouse-kill", None)]


def test_gentle_waits_for_time_and_for_a_healthy_peer() -> None:
    inj = ChaosInjector(PLAN, seed=0, mode="gentle")
    assert inj.due(4.9, seen([0, 1, 2])) is None
    assert inj.due(5.0, seen([0, 2], present=[1])) is None  # group 1 is restarting
    assert inj.due(5.0, seen([1])) is None  # no live peer would be left
    shot = inj.due(5.1, seen([0, 1]))
    assert shot is not None and shot.group == 1 and shot.fault.kind == "kill"
    assert inj.due(6.0, seen([0])) is None
    shot = inj.due(6.5, seen([0, 2]))
    assert shot is not None and shot.group in (0, 2)
    assert inj.due(7.0, seen([0, 2], lighthouse=False)) is None
    shot = inj.due(7.0, seen([]))
    assert shot is not None and shot.group is None and inj.remaining == 0
    assert inj.due(100.0, seen([0, 1, 2])) is None


def test_exact_fires_on_time_at_a_restarting_group_and_says_when_it_hits_nothing() -> None:
    inj = ChaosInjector(PLAN, seed=0, mode="exact")
    assert inj.due(4.9, seen([0, 1, 2])) is None
    # Group 1 is restarting (a process, no commit yet) and it is the only one: hit anyway.
    shot = inj.due(5.0, seen([], present=[1]))
    assert shot is not None and shot.group == 1 and shot.missed is None
    # No healthy group at all: a group-less fault hits one that has a process.
    shot = inj.due(6.0, seen([], present=[2]))
    assert shot is not None and shot.group == 2 and shot.missed is None
    # The Lighthouse is hit while it has seen no commit.
    shot = inj.due(7.0, seen([], lighthouse=False))
    assert shot is not None and shot.group is None and shot.missed is None and inj.remaining == 0

    gone = ChaosInjector([PlannedFault(1.0, "kill", 0), PlannedFault(2.0, "hang", None)], seed=0, mode="exact")
    a, b = gone.due(1.0, seen([], present=[1])), gone.due(2.0, seen([]))
    assert a is not None and a.missed == "group 0 has no process"
    assert b is not None and b.missed == "no group has a process"


def test_schedules_default_to_exact_and_random_draws_to_gentle() -> None:
    assert ChaosConfig(schedule=[{"at_s": 1, "kind": "kill"}]).resolved_mode == "exact"
    assert ChaosConfig(mtbf_s=10).resolved_mode == "gentle"
    assert ChaosConfig(mtbf_s=10, mode="exact").resolved_mode == "exact"
    with pytest.raises(ValueError, match="exact or gentle"):
        ChaosInjector([], seed=0, mode="rough")
