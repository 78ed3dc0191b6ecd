"""`lamplighter chaos JOB --chaos SPEC`: a schedule (or MTBF draw) of faults, one at a time.

Each planned fault waits until its time has come and a target is fit to be hit
(the same rule as local mode's injector: a running group that committed in its
current attempt, with another such group left as the live peer), is injected,
and is watched until its target commits again before the next one fires.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lamplighter.configs.schema import ChaosConfig
from lamplighter.slurm.chaos_slurm import ChaosContext, inject, observe_recovery
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.chaos import plan
from lamplighter.supervisor.chaos_injector import ChaosInjector
from lamplighter.trainer.contract import RunPaths
from lamplighter.trainer.steplog import read_steps


def healthy_groups(ctx: ChaosContext) -> list[int]:
    """Groups whose Slurm job runs and that committed a step in their current attempt."""
    out: list[int] = []
    paths = RunPaths(Path(ctx.sub.run_dir))
    for g, jid in ctx.sub.groups.items():
        try:
            info = ctx.api.job(jid)
        except SlurmError:
            continue
        if info.state != "RUNNING":
            continue
        if any(r.committed and r.attempt == info.restarts for r in read_steps(paths.steps(g))[-50:]):
            out.append(g)
    return sorted(out)


def run_schedule(
    ctx: ChaosContext, cfg: ChaosConfig, recovery_timeout: float, poll: float = 0.5
) -> Iterator[dict[str, Any]]:
    """Inject every planned fault in turn; yield each injection and recovery record."""
    injector = ChaosInjector(plan(cfg, len(ctx.sub.groups)), cfg.seed)
    t0 = time.monotonic()
    while injector.remaining:
        healthy = healthy_groups(ctx)
        shot = injector.due(time.monotonic() - t0, healthy, lighthouse_healthy=len(healthy) >= 1)
        if shot is None:
            time.sleep(poll)
            continue
        rec = inject(ctx, shot.fault.kind, shot.group)
        yield rec
        yield observe_recovery(ctx, rec, recovery_timeout)
