"""The node daemon's policy: a pure function from (now, state, observations, config, context) to actions.

Nothing here reads a clock, Slurm or /proc: the compute loop gathers the
observations and the context, and the executor carries the actions out.

Rules (per Slurm job of a lamplighter replica group on this node):
- A GPU fault is answered by its kind, as the table in supervisor/gpu/faults.py says:
  - hardware (lost, unresponsive, RAS reset, uncorrectable ECC, bad pages,
    ...): every lamplighter job here is killed locally and requeued (the node
    is at fault, so this does not count against the group's restart budget),
    and the node is drained with the GPU's reason, unless the drain rate limit
    refuses it (then the jobs are still moved, and the refusal is logged loudly);
  - a VM fault: the group whose process faulted (its pid in the job's cgroup)
    is restarted like a failed trainer (its budget, backoff and crash loop); a
    fault from a pid of no lamplighter job here restarts nobody and counts only
    against the node; the node is drained only when VM faults of
    `health.vm_fault_drain_after` different users (uids) fell within
    `health.vm_fault_window_s`: one user's buggy kernels, however many jobs
    they run, never drain a shared node (the history is in the state, kept by
    the daemon across restarts, and cleared by the drain);
  - thermal throttling: reported (one action-log line), nothing else.
  A GPU in "unknown" is not a fault.
- A node fault that is no single GPU's (fewer GPUs than node.yaml's gpu_count;
  a training link missing, down or flapping: policy/node_faults.py) is
  answered as a hardware GPU fault: every group here moved, the node drained.
- A trainer exit 0: the group is done. An exit code in
  `restart.no_restart_exit_codes`: give up on the group (no requeue).
- A hang of a job with in-job restarts (`restart.in_job` > 0): kill the hung
  step's processes only, no requeue: the job's own agent starts the trainer
  again inside the allocation (slurm/injob/agent.py); if nothing replaces it, its
  exit is judged as below. Once per step.
- Any other exit (or an exit whose code could not be learned), a hang, a
  D-state or a memory fault: kill what is left of the job here and requeue it
  after `backoff_s(attempt)`, unless Slurm's restart count (the attempt) has
  reached `budget_per_group` or `crash_loop_max` failures of the group fell
  within `crash_loop_window_s`: then give up (loudly). The budget is local
  mode's too (policy/restart.py judge_failure).
- The restart policy is the job's own (`restart` in its job.json, given per
  job in the context); the node config holds only the drain limits.
- A hang of a job whose settings could not be used (its job.json unreadable,
  invalid or of an unknown format version: supervisor/node/job_settings.py fallback,
  named in the context) is reported once per attempt, never acted on: the
  timeouts that found it are the defaults, not the job's.
- A requeue names the attempt that failed: every node of a multi-node group
  may decide the same, and only the first requeue of that attempt happens
  (slurm/requeue.py).
- Observations about an attempt already handled (the stragglers of a job we
  are requeueing) or about a given-up or finished job are ignored.
The attempt is Slurm's Restarts of the job (asked from Slurm, not the
process): the same on every node, so the budget holds wherever the group runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from lamplighter.configs.schema import NodeConfig, RestartConfig
from lamplighter.configs.slurm_names import REASON_PREFIX
from lamplighter.policy import node_faults
from lamplighter.policy.ratelimit import may_drain
from lamplighter.policy.restart import judge_failure, restart_reason
from lamplighter.supervisor.gpu.faults import (
    UNATTRIBUTED,
    gpu_response,
    recent_vm_faults,
    vm_fault_jobs,
)

NodeActionKind = Literal["kill_local", "drain", "requeue", "mark_down", "resume", "give_up", "log", "report"]
TrainerEventKind = Literal["exit", "hang", "dstate", "memory", "vmfault", "stale"]
JobRef = tuple[str, str | None, int]  # (Slurm job id, group, attempt) an action is about
DEFAULT_RESTART = RestartConfig()  # a job whose config cannot be read


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
    attempt: int | None = None  # requeue: the attempt that failed (done once, whichever node asks first)
    jobs: tuple[JobRef, ...] = ()  # the groups this action concerns (a drain: the ones it moves), for the run dirs


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
    renewals: int = 0  # of its `attempt` restarts, renewals before the time limit: not failures
    pids: tuple[tuple[int, int], ...] = ()  # stale: the (pid, start time) of the earlier run's processes
    step: str | None = None  # hang: the trainer's Slurm step

    @property
    def restarts(self) -> int:
        """Restarts that count against the budget: Slurm's restart count less the renewals."""
        return max(0, self.attempt - self.renewals)


@dataclass(frozen=True)
class GpuEvent:
    gpu: int
    status: str  # ok, fault, unresponsive, unknown
    kind: str
    reason: str
    problems: tuple[str, ...] = ()  # every problem kind found (kind is the worst)
    pids: tuple[int, ...] = ()  # vmfault: the pids the driver named
    pid_uids: tuple[tuple[int, int], ...] = ()  # vmfault: (pid, uid) of those still alive


@dataclass(frozen=True)
class NodeEvent:
    """A fault of the node that is no single GPU's: gpu-count, link-missing, link-down, link-flapping."""

    kind: str
    reason: str


@dataclass(frozen=True)
class LocalJob:
    """A lamplighter job with trainer processes on this node right now."""

    job_id: str
    job_name: str
    replica_id: int | None
    attempt: int
    pids: tuple[tuple[int, int], ...]  # every process of the job here (its cgroup's), the agent's too
    renewals: int = 0
    uid: int | None = None  # the job's owner
    steps: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)  # Slurm step -> its processes

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
    restart: Mapping[str, RestartConfig] = field(default_factory=dict)  # job id -> that job's restart policy
    hangs_reported: Mapping[str, str] = field(default_factory=dict)  # job id -> why its hangs are only reported

    def restart_for(self, job_id: str) -> RestartConfig:
        return self.restart.get(job_id, DEFAULT_RESTART)


@dataclass(frozen=True)
class JobTrack:
    handled_attempt: int = -1  # observations of attempts <= this are about what we already handled
    status: Literal["running", "done", "given_up"] = "running"
    failures: tuple[float, ...] = ()
    killed_steps: tuple[str, ...] = ()  # steps killed as hung for the job's own agent to replace
    hang_reported: int = -1  # the last attempt whose hang was reported, not acted on (hangs_reported)


@dataclass(frozen=True)
class NodePolicyState:
    jobs: Mapping[str, JobTrack] = field(default_factory=dict)
    vm_faults: tuple[tuple[float, str], ...] = ()  # (time, job id) of GPU VM faults on this node, within the window
    refusals: Mapping[str, float] = field(default_factory=dict)  # a refused drain's why -> when it was last logged

    def to_json(self) -> dict[str, Any]:
        return {
            j: {
                "handled_attempt": t.handled_attempt,
                "status": t.status,
                "failures": list(t.failures),
                "killed_steps": list(t.killed_steps),
                "hang_reported": t.hang_reported,
            }
            for j, t in self.jobs.items()
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodePolicyState:
        return cls(
            {
                j: JobTrack(
                    int(t["handled_attempt"]),
                    t["status"],
                    tuple(t["failures"]),
                    tuple(t.get("killed_steps", ())),
                    int(t.get("hang_reported", -1)),
                )
                for j, t in data.items()
            }
        )

    def vm_faults_json(self) -> list[list[float | str]]:
        return [[t, j] for t, j in self.vm_faults]

    @staticmethod
    def vm_faults_from_json(data: Any) -> tuple[tuple[float, str], ...]:
        """The persisted VM fault history; anything unreadable in it is dropped, never fatal."""
        out = []
        for item in data if isinstance(data, list) else []:
            try:
                t, j = item
                out.append((float(t), str(j)))
            except (TypeError, ValueError):
                continue
        return tuple(out)


def _obs(ev: TrainerEvent | GpuEvent | NodeEvent) -> dict[str, Any]:
    if isinstance(ev, NodeEvent):
        return {"type": "node", "kind": ev.kind, "reason": ev.reason}
    if isinstance(ev, GpuEvent):
        out: dict[str, Any] = {"type": "gpu", "gpu": ev.gpu, "status": ev.status, "kind": ev.kind, "reason": ev.reason}
        if ev.problems:
            out["problems"] = list(ev.problems)
        if ev.pids:
            out["pids"] = list(ev.pids)
        return out
    out = {
        "type": ev.kind,
        "job_id": ev.job_id,
        "attempt": ev.attempt,
        "code": ev.code,
        "reason": ev.reason,
        **ev.detail,
    }
    if ev.step is not None:
        out["step"] = ev.step
    return out


def _gpu_actions(
    now: float,
    jobs: dict[str, JobTrack],
    faults: Sequence[GpuEvent | NodeEvent],
    cfg: NodeConfig,
    ctx: Context,
    out: list[NodeAction],
) -> None:
    why = "; ".join(f.reason for f in faults)
    observation = {"type": "gpu", "faults": [_obs(f) for f in faults]}
    moved: list[JobRef] = []
    for job in sorted(ctx.jobs.values(), key=lambda j: j.job_id):
        track = jobs.get(job.job_id, JobTrack())
        if track.status != "running" or job.attempt <= track.handled_attempt:
            continue
        reason = f"{why}: moving {job.group} (Slurm job {job.job_id}, attempt {job.attempt}) off {ctx.node}"
        ref = ((job.job_id, job.group, job.attempt),)
        out.append(NodeAction("kill_local", job.job_id, reason, observation, pids=job.pids, group=job.group, jobs=ref))
        out.append(
            NodeAction(
                "requeue",
                job.job_id,
                reason,
                observation,
                start_at=now,
                exclude_node=ctx.node,
                group=job.group,
                attempt=job.attempt,
                jobs=ref,
            )
        )
        moved.append(ref[0])
        jobs[job.job_id] = replace(track, handled_attempt=job.attempt, failures=track.failures + (now,))
    _drain(now, why, observation, tuple(moved), cfg, ctx, out)


def _drain(
    now: float,
    why: str,
    observation: dict[str, Any],
    moved: tuple[JobRef, ...],
    cfg: NodeConfig,
    ctx: Context,
    out: list[NodeAction],
) -> bool:
    """Drain this node (within the rate limit, unless we drained it already); True if a drain was decided."""
    if ctx.node_drained_by_us:
        return False
    allowed, limit = may_drain(
        now, ctx.drain_history, ctx.total_nodes, cfg.max_drain_fraction, cfg.drain_window_s, node=ctx.node
    )
    drain_reason = (REASON_PREFIX + why)[:900]
    if allowed:
        out.append(NodeAction("drain", ctx.node, drain_reason, {**observation, "rate_limit": limit}, jobs=moved))
    else:
        out.append(
            NodeAction(
                "log",
                ctx.node,
                f"NOT DRAINING {ctx.node} despite {why}: {limit}",
                {**observation, "rate_limit": limit, "refused_drain": why},
                jobs=moved,
            )
        )
    # Requeues go after the drain, so Slurm cannot put a job back on this node.
    out.sort(key=lambda a: a.kind == "requeue")
    return allowed


def _vm_fault_actions(
    now: float,
    jobs: dict[str, JobTrack],
    faults: list[GpuEvent],
    history: tuple[tuple[float, str], ...],
    cfg: NodeConfig,
    ctx: Context,
    out: list[NodeAction],
) -> tuple[tuple[float, str], ...]:
    """Restart the faulting group(s); drain if VM faults of enough different users fell within the window.

    A fault is a job's when its pid is one of the job's processes here (the job's cgroup: trainers.py).
    Returns the VM fault history to keep: (time, "uid:N"), or UNATTRIBUTED for a pid gone before its uid was read.
    """
    why = "; ".join(f.reason for f in faults)
    observation = {"type": "gpu", "faults": [_obs(f) for f in faults]}
    pids = {p for f in faults for p in f.pids}
    here = sorted(ctx.jobs.values(), key=lambda j: j.job_id)
    blamed = [j for j in here if pids & {p for p, _ in j.pids}]
    for job in blamed:
        ev = TrainerEvent(
            "vmfault",
            job.job_id,
            job.attempt,
            f"{why}: GPU VM fault in {job.group} (its process); most often the application's own bug",
            detail={"gpu_faults": observation["faults"]},
            group=job.group,
            renewals=job.renewals,
        )
        _trainer_actions(now, jobs, ev, ctx, out)
    if not blamed:
        out.append(
            NodeAction(
                "log",
                ctx.node,
                f"{why}: GPU VM fault from pid(s) {sorted(pids)} of no lamplighter job here: nobody restarted, "
                "counted against the node",
                observation,
            )
        )
    window = cfg.health.vm_fault_window_s
    uids = {uid for f in faults for _, uid in f.pid_uids} | {j.uid for j in blamed if j.uid is not None}
    new = tuple((now, f"uid:{u}") for u in sorted(uids)) or ((now, UNATTRIBUTED),)
    kept = recent_vm_faults(now, history + new, window)
    different = vm_fault_jobs(kept)
    if len(different) < cfg.health.vm_fault_drain_after:
        return kept
    moved = tuple((j.job_id, j.group, j.attempt) for j in blamed)
    reason = (
        f"GPU VM faults from {len(different)} different users ({', '.join(different)}) within "
        f"{window:g} s (health.vm_fault_drain_after {cfg.health.vm_fault_drain_after}); last: {why}"
    )
    drained = _drain(now, reason, {**observation, "vm_faults": [list(f) for f in kept]}, moved, cfg, ctx, out)
    return () if drained else kept


def _fence(ev: TrainerEvent, ctx: Context, out: list[NodeAction]) -> None:
    """A stale run's processes still live here: kill them, nothing else (no requeue, no failure counted)."""
    if not ev.pids:
        return
    ref: tuple[JobRef, ...] = ((ev.job_id, ev.group, ev.attempt),)
    out.append(
        NodeAction("kill_local", ev.job_id, f"FENCED: {ev.reason}", _obs(ev), pids=ev.pids, group=ev.group, jobs=ref)
    )


def _reported_hang(ev: TrainerEvent, track: JobTrack, why: str, ctx: Context, out: list[NodeAction]) -> JobTrack:
    """A hang of a job on the fallback settings: said once per attempt (to its run directory too), never acted on."""
    if track.hang_reported >= ev.attempt:
        return track
    local = ctx.jobs.get(ev.job_id)
    group = local.group if local else ev.group
    reason = (
        f"{ev.reason}: NOT acted on: this job's settings were not applied ({why}), so its hangs are only reported "
        "(found with the default timeouts, not the job's)"
    )
    ref: tuple[JobRef, ...] = ((ev.job_id, group, ev.attempt),)
    out.append(NodeAction("report", ev.job_id, reason, _obs(ev), group=group, jobs=ref))
    return replace(track, hang_reported=ev.attempt)


def _in_job_hang(ev: TrainerEvent, track: JobTrack, ctx: Context, out: list[NodeAction]) -> JobTrack | None:
    """A hung trainer step of a job with in-job restarts: kill that step only; its agent starts the next.

    The new track, or None when this is not such a hang (then the usual failure path applies)."""
    local = ctx.jobs.get(ev.job_id)
    if ev.kind != "hang" or ev.step is None or local is None or ctx.restart_for(ev.job_id).in_job <= 0:
        return None
    if ev.step in track.killed_steps:
        return track  # killed already; its exit (or the hang of what replaces it) comes next
    pids = local.steps.get(ev.step, ())
    reason = (
        f"{ev.reason}: killing its step {ev.step} only; the job's own agent restarts it inside the allocation "
        f"(restart.in_job {ctx.restart_for(ev.job_id).in_job}), and if nothing replaces it its exit is requeued"
    )
    ref: tuple[JobRef, ...] = ((ev.job_id, local.group, ev.attempt),)
    out.append(NodeAction("kill_local", ev.job_id, reason, _obs(ev), pids=pids, group=local.group, jobs=ref))
    return replace(track, killed_steps=track.killed_steps + (ev.step,))


def _trainer_actions(
    now: float, jobs: dict[str, JobTrack], ev: TrainerEvent, ctx: Context, out: list[NodeAction]
) -> None:
    track = jobs.get(ev.job_id, JobTrack())
    if ev.kind == "stale":
        _fence(ev, ctx, out)
        return
    if track.status != "running" or ev.attempt <= track.handled_attempt:
        return
    if ev.kind == "hang" and (why := ctx.hangs_reported.get(ev.job_id)) is not None:
        jobs[ev.job_id] = _reported_hang(ev, track, why, ctx, out)
        return
    in_job = _in_job_hang(ev, track, ctx, out)
    if in_job is not None:
        jobs[ev.job_id] = in_job
        return
    local = ctx.jobs.get(ev.job_id)
    group = local.group if local else ev.group
    pids = local.pids if local else ()
    observation = _obs(ev)
    ref: tuple[JobRef, ...] = ((ev.job_id, group, ev.attempt),)
    rc = ctx.restart_for(ev.job_id)
    if ev.kind == "exit" and ev.code == 0:
        jobs[ev.job_id] = replace(track, status="done", handled_attempt=ev.attempt)
        return
    if ev.kind == "exit" and ev.code is not None and ev.code in rc.no_restart_exit_codes:
        reason = (
            f"GIVING UP on Slurm job {ev.job_id}: {ev.reason}, which is in restart.no_restart_exit_codes "
            f"{rc.no_restart_exit_codes} (the trainer says a restart cannot help)"
        )
        if pids:
            out.append(NodeAction("kill_local", ev.job_id, reason, observation, pids=pids, group=group, jobs=ref))
        out.append(NodeAction("give_up", ev.job_id, reason, observation, group=group, jobs=ref))
        jobs[ev.job_id] = replace(track, status="given_up", handled_attempt=ev.attempt)
        return
    verdict = judge_failure(now, track.failures, ev.restarts, rc)
    if pids:
        out.append(NodeAction("kill_local", ev.job_id, ev.reason, observation, pids=pids, group=group, jobs=ref))
    if verdict.give_up:
        reason = f"GIVING UP on Slurm job {ev.job_id}: {verdict.give_up}; last: {ev.reason}; the group stays down"
        out.append(NodeAction("give_up", ev.job_id, reason, observation, group=group, jobs=ref))
        jobs[ev.job_id] = replace(track, status="given_up", handled_attempt=ev.attempt, failures=verdict.failures)
        return
    delay = verdict.delay_s
    reason = restart_reason(ev.reason, ev.restarts, delay, rc)
    out.append(
        NodeAction(
            "requeue",
            ev.job_id,
            reason,
            observation,
            start_at=now + delay,
            exclude_node=ctx.node,
            group=group,
            attempt=ev.attempt,
            jobs=ref,
        )
    )
    jobs[ev.job_id] = replace(track, handled_attempt=ev.attempt, failures=verdict.failures)


def decide(
    now: float,
    state: NodePolicyState,
    observations: Sequence[TrainerEvent | GpuEvent | NodeEvent],
    config: NodeConfig,
    context: Context,
) -> tuple[NodePolicyState, list[NodeAction]]:
    """The actions for these observations, and the state to pass next time."""
    jobs = dict(state.jobs)
    refusals: dict[str, float] = {}
    out: list[NodeAction] = []
    gpu = [(o, gpu_response(o.status, o.kind, o.problems)) for o in observations if isinstance(o, GpuEvent)]
    drains: list[GpuEvent | NodeEvent] = [o for o, r in gpu if r == "drain"]
    drains += [o for o in observations if isinstance(o, NodeEvent) and node_faults.response(o.kind) == "drain"]
    restarts = [o for o, r in gpu if r == "restart"]
    vm_faults = recent_vm_faults(now, state.vm_faults, config.health.vm_fault_window_s)
    if drains:
        _gpu_actions(now, jobs, drains, config, context, out)  # moves every group here: covers VM faults too
    elif restarts:
        vm_faults = _vm_fault_actions(now, jobs, restarts, vm_faults, config, context, out)
    for o, r in gpu:
        if r == "report":
            out.append(NodeAction("report", context.node, f"{o.reason}: reported, not acted on", _obs(o)))
    for ev in observations:
        if isinstance(ev, TrainerEvent):
            _trainer_actions(now, jobs, ev, context, out)
    # Forget finished jobs that left this node; keep the ones whose budget or crash loop still matters.
    for job_id in list(jobs):
        t = jobs[job_id]
        if job_id in context.jobs or t.status == "given_up":
            continue
        if not t.failures or now - t.failures[-1] > context.restart_for(job_id).crash_loop_window_s:
            del jobs[job_id]
    said = _once_per_refusal(now, state.refusals, out, refusals)
    return NodePolicyState(jobs, vm_faults, refusals), said


REFUSAL_REPEAT_S = 300.0  # a drain the rate limit keeps refusing for a fault that stays is logged this often


def _once_per_refusal(
    now: float, before: Mapping[str, float], out: list[NodeAction], refusals: dict[str, float]
) -> list[NodeAction]:
    """The actions without repeats of a refusal logged less than REFUSAL_REPEAT_S ago (a fault stays: it is
    seen every cycle); `refusals` is filled with what is remembered next."""
    refusals.update({w: t for w, t in before.items() if now - t < REFUSAL_REPEAT_S})
    kept = []
    for a in out:
        why = a.observation.get("refused_drain") if a.kind == "log" else None
        if isinstance(why, str):
            if why in refusals:
                continue
            refusals[why] = now
        kept.append(a)
    return kept
