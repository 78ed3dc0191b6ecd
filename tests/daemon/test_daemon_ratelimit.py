from __future__ import annotations

import pytest

from lamplighter.policy.ratelimit import may_drain

H = [(100.0, "n1"), (200.0, "n2")]

CASES = [
    # (now, history, total, fraction, window, node, allowed, reason fragment)
    (1000.0, [], 10, 0.25, 3600.0, "n9", True, "within limit"),
    (1000.0, H, 10, 0.25, 3600.0, "n9", False, "limit reached"),  # 2 of limit 2
    (1000.0, H, 12, 0.25, 3600.0, "n9", True, "within limit"),  # limit 3
    (1000.0, H, 10, 0.25, 850.0, "n9", True, "1 of 10"),  # n1 at t=100 left the window
    (1000.0, H, 10, 0.25, 800.0, "n9", True, "0 of 10"),
    (1000.0, H, 10, 0.25, 3600.0, "n2", True, "already drained"),  # re-drain counts nothing new
    (1000.0, [(100.0, "n1"), (150.0, "n1")], 10, 0.2, 3600.0, "n9", True, "1 of 10"),  # one node once
    (1000.0, [], 3, 0.25, 3600.0, "n1", False, "less than one node"),
    (1000.0, [], 4, 0.25, 3600.0, "n1", True, "limit 1"),
    (1000.0, [], 3, 1 / 3, 3600.0, "n1", True, "limit 1"),  # float rounding must not lose the node
    (1000.0, [(5000.0, "n1")], 4, 0.25, 60.0, "n2", False, "limit reached"),  # future-dated drain counts
    (1000.0, [], 0, 0.25, 3600.0, "n1", False, "unknown"),
    (1000.0, [], 10, 0.0, 3600.0, "n1", False, "outside"),
    (1000.0, [(999.0, "n1")], 1, 1.0, 3600.0, None, False, "limit reached"),
]


@pytest.mark.parametrize("now,history,total,fraction,window,node,allowed,fragment", CASES)
def test_may_drain(
    now: float,
    history: list[tuple[float, str]],
    total: int,
    fraction: float,
    window: float,
    node: str | None,
    allowed: bool,
    fragment: str,
) -> None:
    ok, reason = may_drain(now, history, total, fraction, window, node=node)
    assert ok is allowed, reason
    assert fragment in reason


def test_flapping_sensor_cannot_empty_cluster() -> None:
    # A sensor that asks to drain a different node every second for an hour.
    history: list[tuple[float, str]] = []
    for t in range(3600):
        node = f"n{t % 20}"
        ok, _ = may_drain(float(t), history, 20, 0.25, 3600.0, node=node)
        if ok and node not in {n for _, n in history}:
            history.append((float(t), node))
    assert len({n for _, n in history}) == 5
