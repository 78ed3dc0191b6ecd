"""What a GPU fault leads to on a node: the table the node policy follows, and the VM fault history.

| fault (GpuObservation kind)                         | action                                                  |
|-----------------------------------------------------|---------------------------------------------------------|
| lost (off the bus), unresponsive (probe or init     | drain at once; the node's groups are killed and         |
| overran its deadline: hung driver)                  | requeued elsewhere                                      |
| gpu-reset (RAS reset), ecc-uncorrectable,           | drain at once (same)                                    |
| ecc-deferred, bad-pages (over bad_pages_max),       |                                                         |
| ecc-correctable (over its max), xgmi, thermal       |                                                         |
| (temperature over its limit)                        |                                                         |
| vmfault (GPU page fault)                            | restart the faulting group (its own restart budget);    |
|                                                     | a pid of no lamplighter job: nobody; drain only once    |
|                                                     | VM faults of vm_fault_drain_after different users       |
|                                                     | (uids) fell within vm_fault_window_s                    |
| thermal-throttle                                    | report (action log line, metric); nothing else          |
| unknown (amdsmi missing, probe error, starting)     | nothing                                                 |

A kind not in the table drains: a new fault kind errs on the side of the hardware.
A GPU with several problems gets the strongest action (drain > restart > report).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

GpuResponse = Literal["drain", "restart", "report", "none"]

GPU_FAULT_ACTIONS: dict[str, GpuResponse] = {
    "lost": "drain",
    "probe-timeout": "drain",
    "init-timeout": "drain",
    "gpu-reset": "drain",
    "ecc-uncorrectable": "drain",
    "ecc-deferred": "drain",
    "ecc-correctable": "drain",
    "bad-pages": "drain",
    "xgmi": "drain",
    "thermal": "drain",
    "vmfault": "restart",
    "thermal-throttle": "report",
}
_STRENGTH: tuple[GpuResponse, ...] = ("none", "report", "restart", "drain")
UNATTRIBUTED = "(unknown user)"  # a VM fault whose pid was gone before its uid could be read


def gpu_response(status: str, kind: str, problems: Iterable[str] = ()) -> GpuResponse:
    """The action for one GPU observation: its status, its worst kind and every problem it found."""
    if status == "unresponsive":
        return "drain"
    if status != "fault":
        return "none"
    kinds = set(problems) | {kind}
    return max((GPU_FAULT_ACTIONS.get(k, "drain") for k in kinds), key=_STRENGTH.index)


def recent_vm_faults(
    now: float, history: Iterable[tuple[float, str]], window_s: float
) -> tuple[tuple[float, str], ...]:
    """(time, "uid:N") of the VM faults within the window, oldest first."""
    return tuple(sorted((t, j) for t, j in history if now - t < window_s))


def vm_fault_jobs(history: Iterable[tuple[float, str]]) -> list[str]:
    """The different sources (users) behind these VM faults."""
    return sorted({j for _, j in history})
