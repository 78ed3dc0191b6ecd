"""The rate limits on drains and on automatic resumes: a flapping sensor must not empty the cluster, nor a
wrong check put many broken nodes back at once.

Pure: time, the history and the limits are all parameters. Resumes share the drains' numbers
(node.yaml max_drain_fraction, drain_window_s), counted apart.
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
    verb: str = "drain",
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
    done = "drained" if verb == "drain" else "resumed"
    if total_nodes <= 0:
        return False, f"cluster size unknown ({total_nodes} nodes): refusing to {verb}"
    if not 0 < max_fraction <= 1:
        return False, f"max_drain_fraction {max_fraction} is outside (0, 1]: refusing to {verb}"
    start = now - window_s
    recent = {name for t, name in drained_history if t > start}
    limit = math.floor(max_fraction * total_nodes + 1e-9)
    scope = f"{len(recent)} of {total_nodes} nodes {done} in the last {window_s:g} s, limit {limit} ({max_fraction:g})"
    if node is not None and node in recent:
        return True, f"{node} already {done} in this window; {scope}"
    if limit == 0:
        return False, f"max_drain_fraction {max_fraction:g} of {total_nodes} nodes is less than one node; {scope}"
    if len(recent) >= limit:
        return False, f"{verb} limit reached: {scope}"
    return True, f"within limit: {scope}"


def may_resume(
    now: float,
    resumed_history: Iterable[tuple[float, str]],
    total_nodes: int,
    max_fraction: float,
    window_s: float,
    node: str | None = None,
) -> tuple[bool, str]:
    """May one more node be resumed automatically now? The drain limit's rule over (time, node) of resumes."""
    return may_drain(now, resumed_history, total_nodes, max_fraction, window_s, node, verb="resume")


def budget_limit(total_nodes: int, max_fraction: float) -> int:
    """The cluster's drain budget: how many nodes lamplighter may hold out of service at once."""
    return math.floor(max_fraction * total_nodes + 1e-9) if total_nodes > 0 and 0 < max_fraction <= 1 else 0


def claim_holds(
    node: str, held: Iterable[tuple[float | None, str]], total_nodes: int, max_fraction: float
) -> tuple[bool, str]:
    """After draining `node`, does its drain fit the cluster's budget? Returns (keep, reason).

    held: (Slurm's reason stamp, name) of every node lamplighter has out of service now, `node` included.
    Every component of every node drains on its own (Slurm runs the HealthCheckProgram on all nodes at once),
    so each checks its drain against the others' afterwards: first come, first kept, in the order of the one
    controller's stamps (ties by name; a node without a stamp counts as earliest). Every racer reads the same
    order once the controller's clock has passed its own stamp (drain_budget.settle), so at most the budget
    keeps its drain whatever the interleaving."""
    limit = budget_limit(total_nodes, max_fraction)
    order = sorted(held, key=lambda sn: (float("-inf") if sn[0] is None else sn[0], sn[1]))
    names = [n for _, n in order]
    if node not in names:
        return True, f"{node} is no longer out of service by lamplighter: nothing to keep"
    rank = names.index(node)
    scope = f"{len(names)} of {total_nodes} nodes out by lamplighter, budget {limit} ({max_fraction:g})"
    if rank < limit:
        return True, f"within the cluster's drain budget: {node} is {rank + 1} of {limit}; {scope}"
    ahead = ", ".join(names[:limit]) or "none allowed"
    return False, f"cluster drain budget spent by earlier drains ({ahead}); {scope}"
