"""Gentle faults wait for a healthy target and a live peer; exact faults fire on time, whatever the state."""

from __future__ import annotations

import itertools

import pytest

from lamplighter.chaos.injector import ChaosInjector, Targets
from lamplighter.chaos.plan import PlannedFault, plan
from lamplighter.configs.schema import ChaosConfig


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
    assert shot is not None and shot.group is None and inj.done
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
    assert shot is not None and shot.group is None and shot.missed is None and inj.done

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


def test_a_random_plan_is_drawn_only_as_far_as_the_run_goes() -> None:
    """Regression: a random plan was drawn 10,000 faults deep up front, and a run's end counted them all."""
    cfg = ChaosConfig(enabled=True, mtbf_s=20.0, seed=1, start_after_s=0, kinds=["kill"])
    inj = ChaosInjector(plan(cfg, 3), seed=1, mode="gentle")
    assert not inj.done and inj.next_at_s() is not None
    shot = inj.due(inj.next_at_s() or 0.0, seen([0, 1, 2]))
    assert shot is not None and inj.fired == 1
    # Two minutes of run: the faults planned by then and not fired, and nothing beyond.
    first_ten = list(itertools.islice(plan(cfg, 3), 10))  # the plan itself has no end: take what is asked for
    assert inj.unfired_by(120.0) == sum(1 for f in first_ten[1:] if f.at_s <= 120.0) < 10
    assert inj.unfired_by(-1.0) == 0
    inj.stop()  # the job ended: nothing more fires
    assert inj.done and inj.due(1e9, seen([0, 1, 2])) is None


def test_a_schedule_counts_its_events_not_fired_by_a_time() -> None:
    inj = ChaosInjector(PLAN, seed=0, mode="exact")
    assert inj.due(5.0, seen([0, 1])) is not None
    assert (inj.unfired_by(6.5), inj.unfired_by(100.0), inj.fired) == (1, 2, 1)


def test_an_event_of_its_own_mode_overrides_the_schedules() -> None:
    cfg = ChaosConfig(
        enabled=True,
        schedule=[{"at_s": 1, "kind": "kill", "group": 1}, {"at_s": 2, "kind": "hang", "group": 1, "mode": "gentle"}],
    )
    inj = ChaosInjector(plan(cfg, 3), seed=0, mode=cfg.resolved_mode)
    assert inj.next_mode() == "exact"
    first = inj.due(1.0, seen([0], present=[1]))  # exact: group 1 hit while it is restarting
    assert first is not None and first.group == 1
    assert inj.next_mode() == "gentle"
    assert inj.due(3.0, seen([0, 2], present=[1])) is None  # gentle: waits for group 1 to heal
    second = inj.due(4.0, seen([0, 1, 2]))
    assert second is not None and second.group == 1 and inj.next_mode() is None


def test_an_event_mode_is_exact_or_gentle() -> None:
    with pytest.raises(ValueError, match="exact"):
        ChaosConfig(schedule=[{"at_s": 1, "kind": "kill", "mode": "soon"}])


def test_gentle_waits_for_the_jobs_warm_standbys_to_be_ready_again() -> None:
    """A second fault on a job whose standby is still importing would start cold: not the job at full strength
    (a CI run's warm-restart test saw its second restart cold, 12 s after the first restart's commit)."""
    inj = ChaosInjector([PlannedFault(5.0, "kill", 0)], seed=0, mode="gentle")
    starting = Targets(healthy=[0, 1], present=[0, 1], lighthouse_healthy=True, spares_ready=False)
    assert inj.due(6.0, starting) is None
    shot = inj.due(7.0, seen([0, 1]))
    assert shot is not None and shot.group == 0
