"""What a host daemon does with its trainers: a pure decision over its assignments, its processes and its lease.

- Lease about to expire (host_lease.fence_due): kill every trainer here and
  start none; the placer may give the groups away once the lease is gone.
- Host taken out (its GPU check found a fault, or `lamplighter hosts out`):
  kill every trainer here and start none, until `lamplighter hosts resume`.
- A trainer whose group is no longer assigned here, or is assigned under
  another epoch, is stale: killed (a trainer of an old epoch never runs beside
  the new one). So is one started for an earlier submission of its job (the
  job cancelled and submitted again, perhaps by someone else, between two reads).
- A group assigned here with no trainer of its epoch: started.
- A trainer that hangs (no progress for the job's health.hang_timeout_s,
  seen by the job's own progress sources): killed, and counted as a failure.
- A trainer that ended: 0 means the job reached its target (nothing more);
  otherwise the job's restart policy (policy.judge_failure, the same as local
  mode and Slurm) restarts it here after its backoff, or gives up on this host:
  the host reports the group failed for this epoch and the placer moves it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from lamplighter.bare.placement import Assignment
from lamplighter.configs.schema import RestartConfig
from lamplighter.policy.restart import judge_failure

GroupRef = tuple[str, int]  # (job, group)


@dataclass(frozen=True)
class Trainer:
    job: str
    group: int
    epoch: int
    pid: int
    exit_code: int | None = None  # None: still running
    spec: int = 0  # the create revision of the job's spec it was started for (0: not known)


@dataclass(frozen=True)
class GroupHistory:
    """This host's restarts of one group under one epoch (a new epoch starts a new history)."""

    epoch: int
    restarts: int = 0
    failures: tuple[float, ...] = ()
    restart_at: float | None = None  # a restart is due at this time
    given_up: bool = False
    done: bool = False


@dataclass(frozen=True)
class HostAction:
    kind: Literal["kill", "start", "report_failed", "done"]
    job: str
    group: int
    epoch: int
    reason: str
    pid: int | None = None
    failure: bool = False  # a kill that counts as the group's failure (a hang), not a move or a fence


@dataclass
class HostDecision:
    actions: list[HostAction] = field(default_factory=list)
    history: dict[GroupRef, GroupHistory] = field(default_factory=dict)


def decide(
    now: float,
    me: str,
    assigned: Mapping[GroupRef, Assignment],
    trainers: Sequence[Trainer],
    history: Mapping[GroupRef, GroupHistory],
    restart: Mapping[str, RestartConfig],
    fence: tuple[bool, str],
    taken_out: str | None = None,
    hung: Mapping[GroupRef, str] | None = None,
    specs: Mapping[str, int] | None = None,
) -> HostDecision:
    """`trainers`: the live ones, and those that ended since the last decision (each reported once).
    `specs`: each job's current spec (create revision); a trainer started for another one is stale."""
    out = HostDecision(history=dict(history))
    fence_now, why = fence
    live = [t for t in trainers if t.exit_code is None]
    specs = specs or {}
    if fence_now:
        out.actions += [HostAction("kill", t.job, t.group, t.epoch, f"fencing: {why}", t.pid) for t in live]
        return out
    if taken_out is not None:
        reason = f"this host was taken out ({taken_out}): its groups go elsewhere"
        out.actions += [HostAction("kill", t.job, t.group, t.epoch, reason, t.pid) for t in live]
        return out
    mine = {ref: a for ref, a in assigned.items() if a.host == me}
    hung = hung or {}
    resubmitted = [t for t in live if t.spec and specs.get(t.job, t.spec) != t.spec]
    reason = "stale: its job was submitted again"
    out.actions += [HostAction("kill", t.job, t.group, t.epoch, reason, t.pid) for t in resubmitted]
    live = [t for t in live if t not in resubmitted]  # the new submission's trainer may start at once
    for t in live:
        a = assigned.get((t.job, t.group))
        if a is None or a.host != me or a.epoch != t.epoch:
            where = "nowhere" if a is None or a.host is None else a.host
            now_at = f"epoch {a.epoch} on {where}" if a else "no longer assigned"
            out.actions.append(HostAction("kill", t.job, t.group, t.epoch, f"stale: the group is now {now_at}", t.pid))
        elif (t.job, t.group) in hung:
            why = hung[(t.job, t.group)]
            out.actions.append(HostAction("kill", t.job, t.group, t.epoch, f"hung: {why}", t.pid, failure=True))
    for ref, a in sorted(mine.items()):
        job, g = ref
        h = out.history.get(ref)
        if h is None or h.epoch != a.epoch:
            h = GroupHistory(a.epoch)
        ended = [t for t in trainers if (t.job, t.group, t.epoch) == (job, g, a.epoch) and t.exit_code is not None]
        running = any((t.job, t.group, t.epoch) == (job, g, a.epoch) for t in live)
        if h.done or h.given_up or running:
            out.history[ref] = h
            continue
        if ended and h.restart_at is None:
            code = ended[-1].exit_code
            if code == 0:
                out.actions.append(HostAction("done", job, g, a.epoch, "the trainer ended with 0: target reached"))
                out.history[ref] = GroupHistory(a.epoch, h.restarts, h.failures, None, False, True)
                continue
            rc = restart.get(job, RestartConfig())
            if code is not None and code in rc.no_restart_exit_codes:
                verdict_give_up = f"exit {code} is in restart.no_restart_exit_codes"
                failures = h.failures
            else:
                v = judge_failure(now, h.failures, h.restarts, rc)
                verdict_give_up, failures = v.give_up, v.failures
                if not v.give_up:
                    out.history[ref] = GroupHistory(a.epoch, h.restarts + 1, failures, now + v.delay_s)
                    continue
            out.actions.append(
                HostAction("report_failed", job, g, a.epoch, f"trainer exited {code}; {verdict_give_up}: move it")
            )
            out.history[ref] = GroupHistory(a.epoch, h.restarts, failures, None, True)
            continue
        if h.restart_at is not None and now < h.restart_at:
            out.history[ref] = h
            continue
        reason = f"assigned here under epoch {a.epoch}" + (f" (restart {h.restarts})" if h.restarts else "")
        out.actions.append(HostAction("start", job, g, a.epoch, reason))
        out.history[ref] = GroupHistory(a.epoch, h.restarts, h.failures, None)
    return out
