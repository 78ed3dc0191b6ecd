"""One GPU check of this node under a deadline: `lamplighter healthcheck` and `lamplighter nodes resume`.

The same GpuCheck the daemon runs (one killable worker per GPU, probes under
`health.probe_deadline_s`), observed until every GPU has a verdict or the
deadline passes. A GPU still without a verdict then is unresponsive.

A one-shot check has no history, so its ECC baseline is zero: it counts the
errors since the driver loaded (the counters are cleared by a GPU reset or a
driver reload), where the daemon counts the growth while it watches. Retired
pages are not judged (there is no earlier count to compare with).

Verdicts: healthy (every GPU ok), faulty (a GPU faulty, unresponsive, or
missing from the expected count), unknown (the check could not run, e.g.
amdsmi missing: a lamplighter installation problem, never a reason to drain).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from lamplighter.configs.schema import NodeHealthConfig
from lamplighter.supervisor.gpu.assess import Baseline
from lamplighter.supervisor.gpu.check import GpuCheck
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.gpu.worker import WorkerSpec

Verdict = Literal["healthy", "faulty", "unknown"]
SINCE_DRIVER_LOAD = Baseline(ce=0, ue=0, de=0, bad_pages=None)
PENDING_KINDS = ("starting", "probe-pending")


@dataclass(frozen=True)
class OnceResult:
    verdict: Verdict
    observations: list[GpuObservation]
    elapsed_s: float

    @property
    def problems(self) -> list[str]:
        return [o.reason for o in self.observations if o.status != "ok"]

    def summary(self) -> str:
        """One line. GPUs with the same problem are said once ("GPUs 0-7 health unknown: amdsmi ..."): a
        missing amdsmi's reason is a paragraph, and a drain reason has room for one."""
        if self.verdict == "healthy":
            return f"{len(self.observations)} GPU(s) healthy"
        alike: dict[str, list[int]] = {}
        for o in self.observations:
            if o.status == "ok":
                continue
            prefix = f"GPU {o.gpu} "
            rest = o.reason[len(prefix) :] if o.reason.startswith(prefix) else f"\0{o.reason}"
            alike.setdefault(rest, []).append(o.gpu)
        said = []
        for rest, gpus in alike.items():
            if rest.startswith("\0"):
                said.append(rest[1:])
            else:
                said.append(f"GPU {gpus[0]} {rest}" if len(gpus) == 1 else f"GPUs {gpu_ranges(gpus)} {rest}")
        return "; ".join(said)


def gpu_ranges(gpus: list[int]) -> str:
    """0, 1, 2, 3, 5 -> "0-3, 5"."""
    out: list[str] = []
    start = prev = gpus[0]
    for g in [*gpus[1:], None]:
        if g is not None and g == prev + 1:
            prev = g
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if g is not None:
            start = prev = g
    return ", ".join(out)


def verdict_of(observations: list[GpuObservation]) -> Verdict:
    if any(o.status in ("fault", "unresponsive") for o in observations):
        return "faulty"
    if not observations or any(o.status != "ok" for o in observations):
        return "unknown"
    return "healthy"


def check_once(
    health: NodeHealthConfig,
    spec: WorkerSpec,
    deadline_s: float,
    expected_gpus: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> OnceResult:
    """Every GPU of the node observed once; returns within about deadline_s (+ one collect)."""
    # The probe deadline must fit in the overall one, or a wedged GPU would outlast it.
    probe_deadline = min(health.probe_deadline_s, deadline_s)
    check = GpuCheck(
        health.model_copy(update={"probe_deadline_s": probe_deadline}),
        spec,
        expected_gpus=expected_gpus,
        collect_s=0.1,
        start_deadline_s=deadline_s,
        clock=clock,
        first_baseline=SINCE_DRIVER_LOAD,
    )
    t0 = clock()
    try:
        while True:
            now = clock() - t0
            obs = check.observe(now)
            if all(o.kind not in PENDING_KINDS for o in obs):
                return OnceResult(verdict_of(obs), obs, clock() - t0)
            if now > deadline_s:
                final = [_overdue(o, deadline_s) for o in obs]
                return OnceResult(verdict_of(final), final, clock() - t0)
    finally:
        check.close()


def _overdue(o: GpuObservation, deadline_s: float) -> GpuObservation:
    if o.kind not in PENDING_KINDS:
        return o
    return GpuObservation(
        o.gpu,
        "unresponsive",
        "check-timeout",
        f"GPU {o.gpu} unresponsive: no health reading within the check's deadline of {deadline_s:g} s ({o.reason})",
        o.values,
    )
