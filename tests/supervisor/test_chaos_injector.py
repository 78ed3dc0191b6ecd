"""The injector only hits healthy targets and never the last healthy group."""

from __future__ import annotations

from lamplighter.supervisor.chaos import PlannedFault
from lamplighter.supervisor.chaos_injector import ChaosInjector


def test_waits_for_time_and_for_a_healthy_peer() -> None:
    inj = ChaosInjector(
        [PlannedFault(5.0, "kill", 1), PlannedFault(6.0, "hang", None), PlannedFault(7.0, "lighthouse-kill", None)],
        seed=0,
    )
    assert inj.due(4.9, [0, 1, 2], True) is None
    assert inj.due(5.0, [0, 2], True) is None  # group 1 is not healthy yet
    assert inj.due(5.0, [1], True) is None  # no live peer would be left
    shot = inj.due(5.1, [0, 1], True)
    assert shot is not None and shot.group == 1 and shot.fault.kind == "kill"
    assert inj.due(6.0, [0], True) is None
    shot = inj.due(6.5, [0, 2], True)
    assert shot is not None and shot.group in (0, 2)
    assert inj.due(7.0, [0, 2], False) is None
    shot = inj.due(7.0, [], True)
    assert shot is not None and shot.group is None and inj.remaining == 0
    assert inj.due(100.0, [0, 1, 2], True) is None
