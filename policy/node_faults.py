"""What a node fault that is not one GPU's leads to: the table, and the decision, a pure function.

| fault (kind)                                   | action                                                  |
|------------------------------------------------|---------------------------------------------------------|
| gpu-count: fewer GPUs than node.yaml gpu_count | drain; the node's groups are requeued elsewhere          |
| link-missing: a network.interfaces or .rdma    | drain (same)                                             |
|   link is not there (driver, PCIe, renamed)    |                                                          |
| link-down: operstate not up, RDMA port not     | drain (same)                                             |
|   ACTIVE                                       |                                                          |
| link-flapping: more than flap_max_changes      | drain (same), even while the link is up for a moment     |
|   link changes within flap_window_s            |                                                          |

A single GPU's faults are in supervisor/gpu/faults.py. The node policy
(supervisor/node_policy.py) reads this table through `response` as it reads
that one: the drain with its rate limit and the `lamplighter: ` reason prefix,
the requeues after it, a node drained once. A kind not in the table drains, as
there: a new fault kind errs on the side of the hardware.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from lamplighter.policy.observations import GpuCountLow, LinkFault

NodeResponse = Literal["drain", "none"]
NODE_FAULT_ACTIONS: dict[str, NodeResponse] = {
    "gpu-count": "drain",
    "link-missing": "drain",
    "link-down": "drain",
    "link-flapping": "drain",
}
NodeFault = GpuCountLow | LinkFault


def response(kind: str) -> NodeResponse:
    """What the table says a node fault of this kind leads to (a kind not in it drains)."""
    return NODE_FAULT_ACTIONS.get(kind, "drain")


class ReadGpu(Protocol):
    """What the count reads of one GPU's observation (supervisor/gpu/observation.py)."""

    @property
    def status(self) -> str: ...

    @property
    def kind(self) -> str: ...


def gpus_found(gpus: Sequence[ReadGpu]) -> int | None:
    """The GPUs amdsmi found this cycle; None when it read none (missing, broken or hung; workers starting): then
    the one placeholder observation GPU 0's worker reports is no count, and a low count is no fault."""
    if not any(g.status != "unknown" for g in gpus):
        return None
    return sum(1 for g in gpus if g.kind != "lost")


def gpu_count_fault(expected: int | None, found: int | None) -> GpuCountLow | None:
    """Fewer GPUs than the node config names; None when fine or unknown (amdsmi did not say: not a fault)."""
    if expected is None or found is None or found >= expected:
        return None
    return GpuCountLow(expected, found)
