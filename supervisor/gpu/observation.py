"""What the GPU check reports about one GPU in one probe cycle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

GpuStatus = Literal["ok", "fault", "unresponsive", "unknown"]


@dataclass(frozen=True)
class GpuObservation:
    """One GPU's health in one cycle.

    status: ok (every check ran and passed), fault (a check failed: `kind`
    names the worst problem), unresponsive (a probe or amdsmi_init overran
    its deadline: a wedged driver), unknown (the checks could not run, e.g.
    the worker is still starting; never counted as healthy).
    kind: "healthy", "ecc-uncorrectable", "ecc-deferred", "ecc-correctable",
    "thermal", "bad-pages", "xgmi", "gpu-reset", "vmfault", "thermal-throttle",
    "lost", "probe-timeout", "init-timeout", "probe-error", "amdsmi-install" (amdsmi missing or not
    matching the node's ROCm: found, expected and the fix in the reason), "starting".
    values: the readings behind the verdict (JSON-able).
    """

    gpu: int
    status: GpuStatus
    kind: str
    reason: str
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return self.status == "ok"
