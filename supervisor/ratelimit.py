"""The drain rate limit: a flapping sensor must not empty the cluster.

Pure: time, the history of drains and the limits are all parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def may_drain(
    now: float,
    drained_history: Iterable[tuple[float, str]],
    total_nodes: int,
    max_fraction: float,
    window_s: float,
    node: str | None = None,
) -> tuple[bool, str]:
    """May one more node be drained now? Returns (allowed, reason).

    drained_history holds (time, node name) of drains done within this
    cluster; only those in the last window_s seconds count, each node once.
    A drain dated in the future (the clock stepped back) counts too: erring
    on the side of draining less. The limit is floor(max_fraction *
    total_nodes) nodes, so a fraction that allows less than one node allows
    none; re-draining a node already counted in the window is always allowed,
    as it drains nothing new.
    """
    if total_nodes <= 0:
        return False, f"cluster size unknown ({total_nodes} nodes): refusing to drain"
    if not 0 < max_fraction <= 1:
        return False, f"max_drain_fraction {max_fraction} is outside (0, 1]: refusing to drain"
    start = now - window_s
    recent = {name for t, name in drained_history if t > start}
    limit = math.floor(max_fraction * total_nodes + 1e-9)
    scope = f"{len(recent)} of {total_nodes} nodes drained in the last {window_s:g} s, limit {limit} ({max_fraction:g})"
    if node is not None and node in recent:
        return True, f"{node} already drained in this window; {scope}"
    if limit == 0:
        return False, f"max_drain_fraction {max_fraction:g} of {total_nodes} nodes is less than one node; {scope}"
    if len(recent) >= limit:
        return False, f"drain limit reached: {scope}"
    return True, f"within limit: {scope}"
