"""`lamplighter chaos JOB --chaos SPEC`: a schedule (or MTBF draw) of faults.

The modes are local mode's (chaos/injector.py). exact (a
schedule's default): each fault fires at its time whatever state its target is
in, while the recoveries of earlier faults are still being watched; a group
whose job is not running, or has no trainer process yet, is missed and says
so. gentle (random draws' default): a fault waits for a running group that
committed in its current attempt, with another such group left as the live
peer, and is watched until its target commits again before the next one fires.

The schedule runs as long as the job does: a random draw has no end of its
own (but max=N), nothing is drawn once every group job has left the queue,
and when the job is over (job_end.py) the loop stops and its open recovery
watches end, saying so, instead of waiting out their timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lamplighter.chaos.injector import ChaosInjector, Shot, Targets
from lamplighter.chaos.plan import plan
from lamplighter.configs.schema import ChaosConfig
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import read_steps
from lamplighter.slurm.chaos.healer import drain
from lamplighter.slurm.chaos.inject import ChaosContext, ChaosError, Recovery, append_record, inject
from lamplighter.slurm.run import SlurmError
from lamplighter.slurm.submit.job_end import JobEnd


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


def running_groups(ctx: ChaosContext) -> list[int]:
    out = []
    for g, jid in ctx.sub.groups.items():
        try:
            if ctx.api.job(jid).state == "RUNNING":
                out.append(g)
        except SlurmError:
            continue
    return sorted(out)


def run_schedule(
    ctx: ChaosContext,
    cfg: ChaosConfig,
    recovery_timeout: float,
    poll: float = 0.5,
    strikes: int | None = None,
    job_end: JobEnd | None = None,
) -> Iterator[dict[str, Any]]:
    """Inject planned faults while the job runs; yield each injection, miss and recovery record as it happens.

    strikes: draw until that many faults struck something (a miss does not count), then only watch.
    Once every group job is out of the queue nothing more is drawn; once the job is over (`job_end`,
    by default job_end.py's rule) the loop stops, and the watches still open end saying so."""
    mode = cfg.resolved_mode
    injector = ChaosInjector(plan(cfg, len(ctx.sub.groups)), cfg.seed, mode)
    end = job_end or JobEnd(ctx.sub, ctx.api)
    t0 = time.monotonic()
    watching: list[Recovery] = []
    struck = 0

    def count(rec: dict[str, Any]) -> None:
        nonlocal struck
        if rec["event"] == "injected":
            struck += 1
            watching.append(Recovery(ctx, rec, time.monotonic() + recovery_timeout))
            if strikes is not None and struck >= strikes:
                injector.stop()

    while not injector.done or watching or ctx.pending_healers:
        if end.look():
            injector.stop()
            for r in watching:
                yield r.finish(job_ended=end.reason)
            return
        for r in [r for r in watching if r.poll()]:
            watching.remove(r)
            yield r.finish()
        for rec in drain(ctx.fired):  # kill-healer: the healer killed (or the heal never seen)
            ctx.pending_healers -= 1
            yield rec
            count(rec)
        if (injector.next_mode() == "gentle" and watching) or injector.done or end.ending:
            time.sleep(poll)  # gentle: one fault at a time; ending: no group job left to strike
            continue
        healthy = healthy_groups(ctx)
        seen = Targets(
            healthy=healthy,
            # exact strikes whatever has a process, gentle only the healthy (the injector picks by the fault's mode)
            present=running_groups(ctx),
            lighthouse_healthy=len(healthy) >= 1,
        )
        shot = injector.due(time.monotonic() - t0, seen)
        if shot is None:
            wait = poll
            nxt = injector.next_at_s()
            if nxt is not None:
                wait = min(poll, max(0.0, t0 + nxt - time.monotonic()))
            time.sleep(wait)
            continue
        rec = _shoot(ctx, shot)
        yield rec
        count(rec)


def _shoot(ctx: ChaosContext, shot: Shot) -> dict[str, Any]:
    """Inject a shot, or record why it hit nothing (exact mode: a group between attempts)."""
    kind = shot.fault.kind
    why = shot.missed
    if why is None:
        try:
            return inject(ctx, kind, shot.group)
        except (ChaosError, SlurmError) as e:  # SlurmError: the controller is down (slurmctld-restart)
            why = str(e)
    rec = {"event": "missed", "t": ctx.now(), "kind": kind, "group": shot.group, "why": why}
    append_record(ctx.journal, rec)
    return rec
