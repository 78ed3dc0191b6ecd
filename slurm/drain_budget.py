"""One drain budget for the whole cluster, kept by Slurm's own record of drains.

Every lamplighter component drains on its own: each node's daemon, the head, and the HealthCheckProgram and
Prolog, which Slurm runs on every node at the same instant. A limit each checks before its drain cannot hold
then (all read "0 out" at once), so each drain is a claim checked after it is made: the node is drained, the
claimant waits until slurmctld's clock has passed the second its reason was stamped in (every earlier claim is
then visible to everyone), and ranks every node lamplighter has out by those stamps
(policy.ratelimit.claim_holds). A claim past the budget is undone (the node resumed, its reason still ours):
for the second or two this takes the node takes no new job, and no running job is touched.

The one ledger is Slurm's: nothing to lock, nothing to share, and a drain an admin made by hand with a
`lamplighter: ` reason counts too. mark-downs (the head's, for a silent node) are counted but never undone:
a node Slurm itself sees as dead is Slurm's to mark.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from lamplighter.policy.ratelimit import claim_holds
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.drained_nodes import by_lamplighter, reason_time
from lamplighter.slurm.parsers import NodeInfo
from lamplighter.slurm.run import SlurmError

SETTLE_TIMEOUT_S = 5.0  # slurmctld's clock runs with ours; one that lags further is not waited for


@dataclass(frozen=True)
class ClaimResult:
    kept: bool
    reason: str
    undone: bool = False  # the drain was made and taken back


def held_out(nodes: list[NodeInfo]) -> list[tuple[float | None, str]]:
    """(reason stamp, name) of each node lamplighter has drained or marked down now."""
    return [(reason_time(n.reason_time), n.name) for n in nodes if by_lamplighter(n) and (n.is_drained or n.is_down)]


def settle(api: SlurmApi, stamp: float, sleep: Callable[[float], None], timeout_s: float = SETTLE_TIMEOUT_S) -> bool:
    """Wait until slurmctld's clock has left the second `stamp` is in; False if it did not within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        ahead = stamp + 1 - api.controller_time()
        if ahead <= 0:
            return True
        if time.monotonic() + ahead > deadline:
            return False
        sleep(min(ahead + 0.05, 1.0))


def confirm_drain(
    api: SlurmApi, node: str, max_fraction: float, sleep: Callable[[float], None] = time.sleep
) -> ClaimResult:
    """Keep the drain of `node` lamplighter just made, or undo it when the cluster's budget was spent first."""
    try:
        mine = api.node(node)
        stamp = reason_time(mine.reason_time)
        if not (by_lamplighter(mine) and mine.is_drained):
            return ClaimResult(True, f"{node} is no longer drained by lamplighter ({mine.reason!r}): nothing to undo")
        if stamp is not None and not settle(api, stamp, sleep):
            return ClaimResult(True, "slurmctld's clock did not pass the drain's stamp: drain kept, unconfirmed")
        nodes = api.nodes()
    except (SlurmError, ValueError) as e:
        return ClaimResult(True, f"cannot confirm the drain against the cluster's budget ({e}): drain kept")
    kept, why = claim_holds(node, held_out(nodes), len(nodes), max_fraction)
    if kept:
        return ClaimResult(True, why)
    try:
        now = api.node(node)
        if not by_lamplighter(now):  # someone else's reason since: theirs to keep
            return ClaimResult(True, f"{why}; {node} has another reason now ({now.reason!r}): left as it is")
        api.resume(node)
    except (SlurmError, ValueError) as e:
        return ClaimResult(True, f"{why}; could not undo the drain: {e}")
    return ClaimResult(False, f"drain undone: {why}", undone=True)
