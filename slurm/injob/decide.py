"""What the in-job agent does once its trainer step ended: a pure function of (now, state, observation, config);
and, while it runs, when its warm spare starts (spare_due).

- exit 0: the trainer reached its target: done (the job completes);
- the agent was told to stop (scancel, a requeue, the time limit): stop, restart nothing;
- the job is already complete (another group reached the target, `completed`): done;
- an exit code in restart.no_restart_exit_codes: end the job with it (the node daemon gives the group up);
- any other exit, or death by a signal: restart inside the allocation, from the warm spare if there is
  one, else cold; unless restart.in_job restarts were spent in this allocation or a crash loop
  (restart.crash_loop_max failures within crash_loop_window_s, supervisor/policy.judge_failure) shows:
  then end the job with the trainer's status, and the node daemon requeues it under its own budget.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from lamplighter.configs.schema import RestartConfig
from lamplighter.policy.restart import judge_failure

Action = Literal["done", "stop", "end", "restart_warm", "restart_cold"]
MAX_IN_JOB = 99  # the attempt is restarts * 100 + in-job restarts (rundir/contract.py)
SPARE_AFTER_S = 60.0  # a trainer that beats no heartbeat gets its spare this long after it started


def spare_due(now: float, started: float, committed: bool) -> bool:
    """Start the warm spare now? Once the attempt has committed a step (a spare's imports would slow a
    trainer still starting), or SPARE_AFTER_S after it started (a trainer that writes no heartbeat)."""
    return committed or now - started > SPARE_AFTER_S


@dataclass(frozen=True)
class AgentState:
    in_job: int = 0  # in-job restarts so far in this allocation
    failures: tuple[float, ...] = ()  # failure times within the crash-loop window


@dataclass(frozen=True)
class StepEnded:
    """What the agent saw when the trainer step ended."""

    status: int  # srun's exit status (128 + N for a signal)
    stopping: bool = False  # the agent got SIGTERM, SIGINT or SIGHUP
    completed: bool = False  # the job's `completed` marker is there (and its owner's)
    spare_ready: bool = False  # a spare step is alive to take over


@dataclass(frozen=True)
class AgentDecision:
    action: Action
    reason: str
    exit_status: int = 0  # done, stop, end: the agent's own exit status
    delay_s: float = 0.0  # restart: not before this


def decide(now: float, state: AgentState, seen: StepEnded, cfg: RestartConfig) -> tuple[AgentState, AgentDecision]:
    code = seen.status
    if code == 0:
        return state, AgentDecision("done", "the trainer reached its target (exit 0)", 0)
    if seen.stopping:
        return state, AgentDecision(
            "stop", f"told to stop (the trainer step ended with {code}): restarting nothing", code
        )
    if seen.completed:
        return state, AgentDecision("done", f"the trainer ended with {code} after the job reached its target", 0)
    if code in cfg.no_restart_exit_codes:
        return state, AgentDecision(
            "end",
            f"the trainer ended with {code}, in restart.no_restart_exit_codes {cfg.no_restart_exit_codes}: "
            "a restart cannot help",
            code,
        )
    budget = min(cfg.in_job, MAX_IN_JOB)
    # The in-job budget is the crash-loop judge's budget here: the job-wide one counts Slurm's restarts.
    verdict = judge_failure(now, state.failures, state.in_job, cfg.model_copy(update={"budget_per_group": budget}))
    state = replace(state, failures=verdict.failures)
    if verdict.give_up:
        return state, AgentDecision(
            "end",
            f"the trainer ended with {code}; no in-job restart: {verdict.give_up.replace('budget_per_group', 'in_job')}"
            ": the job ends, for the node daemon to requeue",
            code,
        )
    how: Action = "restart_warm" if seen.spare_ready else "restart_cold"
    n = state.in_job + 1
    state = replace(state, in_job=n)
    where = "from the warm spare" if seen.spare_ready else "cold"
    return state, AgentDecision(
        how,
        f"the trainer ended with {code}: in-job restart {n}/{budget} {where} in {verdict.delay_s:.1f} s",
        delay_s=verdict.delay_s,
    )
