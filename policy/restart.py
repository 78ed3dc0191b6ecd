"""The restart policy: a pure function from (now, state, observations, config) to decisions.

Nothing here reads a clock, touches a process or logs: the caller passes the
time and the observations in, carries the decisions out, and keeps the
returned state for the next call. Every decision says why.

Rules, per replica group (the Lighthouse is treated as one more restartable thing):
- A trainer that exits 0 reached the target step: the group is done, and from
  then on the job is finishing: failed groups are stopped, not restarted
  (there would be no live peer to heal from once the others exit).
- An exit code in `restart.no_restart_exit_codes` gives up on the group.
- Any other exit, a hang, a D-state or memory fault is a failure: the group is
  killed and restarted after a backoff, unless the restart budget is spent or
  `crash_loop_max` failures fell within `crash_loop_window_s` (then: give up).
- Backoff before the n-th restart (n = 0, 1, ...): min(backoff_max_s,
  backoff_initial_s * backoff_factor ** n).
- Observations about an earlier attempt of a group, or about a group that is
  not running, are ignored: killing a group makes its processes exit, and
  those exits are not new failures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from lamplighter.configs.schema import RestartConfig
from lamplighter.policy.observations import LighthouseDown, Observation, ProcessExited

Action = Literal["kill", "restart", "give_up", "done", "stop", "restart_lighthouse", "finish"]
Status = Literal["running", "backoff", "done", "stopped", "given_up"]

# After the first group reaches the target, the others get this long to do the same.
FINISH_GRACE_S = 60.0


@dataclass(frozen=True)
class GroupAction:
    """One thing to do now (or, for a restart, not before `not_before`); group None: the Lighthouse or the job."""

    action: Action
    group: int | None
    reason: str
    not_before: float = 0.0


@dataclass(frozen=True)
class GroupState:
    """The policy's memory of one group (or of the Lighthouse)."""

    status: Status = "running"
    attempt: int = 0
    restarts: int = 0
    failures: tuple[float, ...] = ()
    restart_at: float | None = None
    reason: str = ""


@dataclass(frozen=True)
class PolicyState:
    groups: tuple[GroupState, ...]
    lighthouse: GroupState = GroupState()
    finishing_since: float | None = None
    finished: bool = False

    @classmethod
    def initial(cls, n_groups: int) -> PolicyState:
        return cls(groups=tuple(GroupState() for _ in range(n_groups)))


@dataclass(frozen=True)
class PolicyStep:
    state: PolicyState
    decisions: list[GroupAction]


def backoff_s(restarts_so_far: int, cfg: RestartConfig) -> float:
    """Delay before the next restart of something restarted `restarts_so_far` times already."""
    return float(min(cfg.backoff_max_s, cfg.backoff_initial_s * cfg.backoff_factor**restarts_so_far))


@dataclass(frozen=True)
class BudgetVerdict:
    """What the restart budget says about one more failure."""

    failures: tuple[float, ...]  # the failures within restart.crash_loop_window_s, this one included
    give_up: str = ""  # why there is no restart; "" = restart after delay_s
    delay_s: float = 0.0


def judge_failure(now: float, failures: Sequence[float], restarts: int, cfg: RestartConfig) -> BudgetVerdict:
    """The one restart budget of local mode and the node daemon: crash loop first, then the budget, then backoff.

    `restarts` is what counts against restart.budget_per_group: local mode counts its own restarts; on Slurm
    it is the job's restart count less its renewals, the same on every node.
    """
    recent = tuple(t for t in failures if now - t < cfg.crash_loop_window_s) + (now,)
    if len(recent) >= cfg.crash_loop_max:
        why = (
            f"crash loop, {len(recent)} failures within {cfg.crash_loop_window_s:g} s "
            f"(restart.crash_loop_max {cfg.crash_loop_max})"
        )
        return BudgetVerdict(recent, give_up=why)
    if restarts >= cfg.budget_per_group:
        why = f"restart budget exhausted after {restarts} restarts (restart.budget_per_group {cfg.budget_per_group})"
        return BudgetVerdict(recent, give_up=why)
    return BudgetVerdict(recent, delay_s=backoff_s(restarts, cfg))


def restart_reason(why: str, restarts: int, delay_s: float, cfg: RestartConfig) -> str:
    return f"{why}; restart {restarts + 1}/{cfg.budget_per_group} in {delay_s:.1f} s"


def _fail(now: float, gs: GroupState, why: str, cfg: RestartConfig, what: str) -> tuple[GroupState, str, bool]:
    """A failure of something restartable: its new state, the reason, and whether it was given up."""
    verdict = judge_failure(now, gs.failures, gs.restarts, cfg)
    if verdict.give_up:
        reason = f"GIVING UP on {what}: {verdict.give_up}; last: {why}"
        return replace(gs, status="given_up", failures=verdict.failures, reason=reason), reason, True
    reason = restart_reason(why, gs.restarts, verdict.delay_s, cfg)
    restart_at = now + verdict.delay_s
    return replace(gs, status="backoff", failures=verdict.failures, restart_at=restart_at, reason=reason), reason, False


def _on_trainer(
    now: float, st: PolicyState, obs: Observation, cfg: RestartConfig, out: list[GroupAction]
) -> PolicyState:
    assert not isinstance(obs, LighthouseDown)
    g = obs.group
    if not 0 <= g < len(st.groups):
        return st
    gs = st.groups[g]
    if gs.status != "running" or obs.attempt != gs.attempt:
        return st
    groups = list(st.groups)
    if isinstance(obs, ProcessExited) and obs.returncode == 0:
        groups[g] = replace(gs, status="done", reason=f"{obs.reason}: reached the target step")
        out.append(GroupAction("done", g, groups[g].reason))
        finishing = st.finishing_since if st.finishing_since is not None else now
        return replace(st, groups=tuple(groups), finishing_since=finishing)
    if st.finishing_since is not None:
        groups[g] = replace(gs, status="stopped", reason=f"{obs.reason}; not restarted: the job is finishing")
        out += [GroupAction("kill", g, groups[g].reason), GroupAction("stop", g, groups[g].reason)]
    elif isinstance(obs, ProcessExited) and obs.returncode in cfg.no_restart_exit_codes:
        reason = (
            f"GIVING UP on group {g}: {obs.reason}, which is in restart.no_restart_exit_codes "
            f"{cfg.no_restart_exit_codes} (the trainer says a restart cannot help)"
        )
        groups[g] = replace(gs, status="given_up", reason=reason)
        out += [GroupAction("kill", g, reason), GroupAction("give_up", g, reason)]
    else:
        groups[g], reason, gave_up = _fail(now, gs, obs.reason, cfg, f"group {g}")
        out.append(GroupAction("kill", g, reason))
        if gave_up:
            out.append(GroupAction("give_up", g, reason))
    return replace(st, groups=tuple(groups))


def _on_lighthouse(
    now: float, st: PolicyState, obs: LighthouseDown, cfg: RestartConfig, out: list[GroupAction]
) -> PolicyState:
    if st.lighthouse.status != "running":
        return st
    lh, reason, gave_up = _fail(now, st.lighthouse, obs.reason, cfg, "the Lighthouse")
    if gave_up:
        out.append(GroupAction("give_up", None, reason))
    return replace(st, lighthouse=lh)


def _due_restarts(now: float, st: PolicyState, cfg: RestartConfig, out: list[GroupAction]) -> PolicyState:
    lh = st.lighthouse
    if lh.status == "backoff" and lh.restart_at is not None and now >= lh.restart_at:
        out.append(GroupAction("restart_lighthouse", None, f"Lighthouse: {lh.reason}", lh.restart_at))
        lh = replace(lh, status="running", attempt=lh.attempt + 1, restarts=lh.restarts + 1, restart_at=None)
    groups = list(st.groups)
    for g, gs in enumerate(groups):
        if gs.status != "backoff" or gs.restart_at is None:
            continue
        if st.finishing_since is not None:
            groups[g] = replace(
                gs, status="stopped", restart_at=None, reason=f"{gs.reason}; cancelled: the job is finishing"
            )
            out.append(GroupAction("stop", g, groups[g].reason))
        elif now >= gs.restart_at:
            out.append(GroupAction("restart", g, gs.reason, gs.restart_at))
            groups[g] = replace(gs, status="running", attempt=gs.attempt + 1, restarts=gs.restarts + 1, restart_at=None)
    return replace(st, groups=tuple(groups), lighthouse=lh)


def _finish(now: float, st: PolicyState, grace_s: float, out: list[GroupAction]) -> PolicyState:
    if st.finished:
        return st
    groups = list(st.groups)
    if st.finishing_since is not None and now - st.finishing_since > grace_s:
        for g, gs in enumerate(groups):
            if gs.status == "running":
                reason = f"group {g} did not reach the target within {grace_s:g} s of the first group that did"
                out.append(GroupAction("kill", g, reason))
                groups[g] = replace(gs, status="stopped", reason=reason)
                out.append(GroupAction("stop", g, reason))
    st = replace(st, groups=tuple(groups))
    statuses = [gs.status for gs in st.groups]
    if st.lighthouse.status == "given_up":
        out.append(GroupAction("finish", None, st.lighthouse.reason))
        return replace(st, finished=True)
    if all(s in ("done", "stopped", "given_up") for s in statuses):
        done = statuses.count("done")
        reason = f"{done}/{len(statuses)} groups reached the target" + (
            "" if done else "; none did: " + "; ".join(gs.reason for gs in st.groups if gs.status == "given_up")
        )
        out.append(GroupAction("finish", None, reason))
        return replace(st, finished=True)
    return st


def decide(
    now: float,
    state: PolicyState,
    observations: Sequence[Observation],
    config: RestartConfig,
    *,
    finish_grace_s: float = FINISH_GRACE_S,
) -> PolicyStep:
    """Decisions for these observations at time `now`, and the state to pass next time."""
    out: list[GroupAction] = []
    st = state
    for obs in observations:
        if isinstance(obs, LighthouseDown):
            st = _on_lighthouse(now, st, obs, config, out)
        else:
            st = _on_trainer(now, st, obs, config, out)
    st = _due_restarts(now, st, config, out)
    st = _finish(now, st, finish_grace_s, out)
    return PolicyStep(st, out)
