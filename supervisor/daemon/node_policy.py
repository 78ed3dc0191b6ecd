"""The node daemon's policy: a pure function from (now, state, observations, config, context) to actions.

Nothing here reads a clock, Slurm or /proc: the compute loop gathers the
observations and the context, and the executor carries the actions out.

Rules (per Slurm job of a lamplighter replica group on this node):
- A GPU of this node faulty or unresponsive: every lamplighter job here is
  killed locally and requeued (the node is at fault, so this does not count
  against the group's restart budget), and the node is drained with the GPU's
  reason, unless the drain rate limit refuses it (then the jobs are still
  moved, and the refusal is logged loudly). A GPU in "unknown" is not a fault.
- A trainer exit 0: the group is done. An exit code in
  `restart.no_restart_exit_codes`: give up on the group (no requeue).
- Any other exit (or an exit whose code could not be learned), a hang, a
  D-state or a memory fault: kill what is left of the job here and requeue it
  after `backoff_s(attempt)`, unless Slurm's restart count (the attempt) has
  reached `budget_per_group` or `crash_loop_max` failures of the group fell
  within `crash_loop_window_s`: then give up (loudly).
- Observations about an attempt already handled (the stragglers of a job we
  are requeueing) or about a given-up or finished job are ignored.
The attempt is Slurm's SLURM_RESTART_COUNT as the trainer saw it: it is the
same on every node, so the budget holds wherever the group runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from lamplighter.configs.schema import NodeConfig
from lamplighter.supervisor.daemon.ratelimit import may_drain
from lamplighter.supervisor.policy import backoff_s

NodeActionKind = Literal["kill_local", "drain", "requeue", "mark_down", "give_up", "log"]
TrainerEventKind = Literal["exit", "hang", "dstate", "memory"]
REASON_PREFIX = "lamplighter: "


@dataclass(frozen=True)
class NodeAction:
    """One thing to do; `target` is a job id or a node name."""

    kind: NodeActionKind
    target: str
    reason: str
    observation: dict[str, Any] = field(default_factory=dict)
    pids: tuple[tuple[int, int], ...] = ()  # kill_local: (pid, start_time) pairs
    start_at: float | None = None  # requeue: do not start before (epoch seconds)
    exclude_node: str | None = None  # requeue: keep the job off this node on its next start
    group: str | None = None  # "<job name>/g<replica>" for restart accounting


@dataclass(frozen=True)
class TrainerEvent:
    """A trainer of a job on this node exited, hung, is stuck in D state or uses too much memory."""

    kind: TrainerEventKind
    job_id: str
    attempt: int
    reason: str
    code: int | None = None  # exit: the exit code if known
    detail: dict[str, Any] = field(default_factory=dict)
    group: str | None = None  # "<job name>/g<replica>"


@dataclass(frozen=True)
class GpuEvent:
    gpu: int
    status: str  # ok, fault, unresponsive, unknown
    kind: str
    reason: str


@dataclass(frozen=True)
class LocalJob:
    """A lamplighter job with trainer processes on this node right now."""

    job_id: str
    job_name: str
    replica_id: int | None
    attempt: int
    pids: tuple[tuple[int, int], ...]

    @property
    def group(self) -> str:
        return f"{self.job_name}/g{self.replica_id}"


@dataclass(frozen=True)
class Context:
    """What the loop knows about the world besides the observations."""

    node: str
    jobs: Mapping[str, LocalJob]
    node_drained_by_us: bool = False
    drain_history: tuple[tuple[float, str], ...] = ()
    total_nodes: int = 0


@dataclass(frozen=True)
class JobTrack:
    handled_attempt: int = -1  # observations of attempts <= this are about what we already handled
    status: Literal["running", "done", "given_up"] = "running"
    failures: tuple[float, ...] = ()


@dataclass(frozen=True)
class NodePolicyState:
    jobs: Mapping[str, JobTrack] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            j: {"handled_attempt": t.handled_attempt, "status": t.status, "failures": list(t.failures)}
            for j, t in self.jobs.items()
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodePolicyState:
        return cls({j: JobTrack(int(t["handled_attempt"]), t["status"], tuple(t["failures"])) for j, t in data.items()})


def _obs(ev: TrainerEvent | GpuEvent) -> dict[str, Any]:
    if isinstance(ev, GpuEvent):
        return {"type": "gpu", "gpu": ev.gpu, "status": ev.status, "kind": ev.kind, "reason": ev.reason}
    return {
        "type": ev.kind,
        "job_id": ev.job_id,
        "attempt": ev.attempt,
        "code": ev.code,
        "reason": ev.reason,
        **ev.detail,
    }


def _gpu_actions(
    now: float, jobs: dict[str, JobTrack], faults: list[GpuEvent], cfg: NodeConfig, ctx: Context, out: list[NodeAction]
) -> None:
    why = "; ".join(f.reason for f in faults)
    observation = {"type": "gpu", "faults": [_obs(f) for f in faults]}
    for job in sorted(ctx.jobs.values(), key=lambda j: j.job_id):
        track = jobs.get(job.job_id, JobTrack())
        if track.status != "running" or job.attempt <= track.handled_attempt:
            continue
        reason = f"{why}: moving {job.group} (Slurm job {job.job_id}, attempt {job.attempt}) off {ctx.node}"
        out.append(NodeAction("kill_local", job.job_id, reason, observation, pids=job.pids, group=job.group))
        out.append(
            NodeAction("requeue", job.job_id, reason, observation, start_at=now, exclude_node=ctx.node, group=job.group)
        )
        jobs[job.job_id] = replace(track, handled_attempt=job.attempt, failures=track.failures + (now,))
    if ctx.node_drained_by_us:
        return
    allowed, limit = may_drain(
        now, ctx.drain_history, ctx.total_nodes, cfg.max_drain_fraction, cfg.drain_window_s, node=ctx.node
    )
    drain_reason = (REASON_PREFIX + why)[:900]
    if allowed:
        out.append(NodeAction("drain", ctx.node, drain_reason, {**observation, "rate_limit": limit}))
    else:
        out.append(
            NodeAction(
                "log", ctx.node, f"NOT DRAINING {ctx.node} despite {why}: {limit}", {**observation, "rate_limit": limit}
            )
        )
    # Requeues go after the drain, so Slurm cannot put a job back on this node.
    out.sort(key=lambda a: a.kind == "requeue")


def _trainer_actions(
    now: float, jobs: dict[str, JobTrack], ev: TrainerEvent, cfg: NodeConfig, ctx: Context, out: list[NodeAction]
) -> None:
    track = jobs.get(ev.job_id, JobTrack())
    if track.status != "running" or ev.attempt <= track.handled_attempt:
        return
    local = ctx.jobs.get(ev.job_id)
    group = local.group if local else ev.group
    pids = local.pids if local else ()
    observation = _obs(ev)
    rc = cfg.restart
    if ev.kind == "exit" and ev.code == 0:
        jobs[ev.job_id] = replace(track, status="done", handled_attempt=ev.attempt)
        return
    if ev.kind == "exit" and ev.code is not None and ev.code in rc.no_restart_exit_codes:
        reason = (
            f"GIVING UP on Slurm job {ev.job_id}: {ev.reason}, which is in restart.no_restart_exit_codes "
            f"{rc.no_restart_exit_codes} (the trainer says a restart cannot help)"
        )
        if pids:
            out.append(NodeAction("kill_local", ev.job_id, reason, observation, pids=pids, group=group))
        out.append(NodeAction("give_up", ev.job_id, reason, observation, group=group))
        jobs[ev.job_id] = replace(track, status="given_up", handled_attempt=ev.attempt)
        return
    recent = tuple(t for t in track.failures if now - t < rc.crash_loop_window_s) + (now,)
    give_up = None
    if len(recent) >= rc.crash_loop_max:
        give_up = (
            f"crash loop, {len(recent)} failures within {rc.crash_loop_window_s:g} s "
            f"(restart.crash_loop_max {rc.crash_loop_max})"
        )
    elif ev.attempt >= rc.budget_per_group:
        give_up = (
            f"restart budget exhausted after {ev.attempt} restarts (restart.budget_per_group {rc.budget_per_group})"
        )
    if pids:
        out.append(NodeAction("kill_local", ev.job_id, ev.reason, observation, pids=pids, group=group))
    if give_up:
        reason = f"GIVING UP on Slurm job {ev.job_id}: {give_up}; last: {ev.reason}; the group stays down"
        out.append(NodeAction("give_up", ev.job_id, reason, observation, group=group))
        jobs[ev.job_id] = replace(track, status="given_up", handled_attempt=ev.attempt, failures=recent)
        return
    delay = backoff_s(ev.attempt, rc)
    reason = f"{ev.reason}; restart {ev.attempt + 1}/{rc.budget_per_group} in {delay:.1f} s"
    out.append(
        NodeAction("requeue", ev.job_id, reason, observation, start_at=now + delay, exclude_node=ctx.node, group=group)
    )
    jobs[ev.job_id] = replace(track, handled_attempt=ev.attempt, failures=recent)


def decide(
    now: float,
    state: NodePolicyState,
    observations: Sequence[TrainerEvent | GpuEvent],
    config: NodeConfig,
    context: Context,
) -> tuple[NodePolicyState, list[NodeAction]]:
    """The actions for these observations, and the state to pass next time."""
    jobs = dict(state.jobs)
    out: list[NodeAction] = []
    faults = [o for o in observations if isinstance(o, GpuEvent) and o.status in ("fault", "unresponsive")]
    if faults:
        _gpu_actions(now, jobs, faults, config, context, out)
    for ev in observations:
        if isinstance(ev, TrainerEvent):
            _trainer_actions(now, jobs, ev, config, context, out)
    # Forget finished jobs that left this node; keep the ones whose budget or crash loop still matters.
    for job_id in list(jobs):
        t = jobs[job_id]
        if job_id in context.jobs or t.status == "given_up":
            continue
        if not t.failures or now - t.failures[-1] > config.restart.crash_loop_window_s:
            del jobs[job_id]
    return NodePolicyState(jobs), out
