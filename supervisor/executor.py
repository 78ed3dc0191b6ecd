"""Carrying out the node policy's actions: journaled, checked, logged.

Every action of one decision is journaled as intended before the first of
them runs, and as done after it ran: a daemon killed in between finds the
rest pending after its restart and `recover` finishes them, each checked
against the world first so that nothing happens twice (recovery.py). A
process is signalled only if its (pid, start time) is still the one
observed. Each action, or refusal, is one ActionLog line with its reason and
the observation behind it.

`observe` (node.yaml `mode: observe`, for rollout) carries nothing out: each
action decided is journaled as an event and written as one ActionLog line,
outcome "observed", reason "would <kind>: ...", to the node's log and the run
directories of the jobs it concerns (`lamplighter why` shows them), and to the
daemon's log (the journal under systemd).

`pause_before` (tests only: `lamplighter supervise --test-pause-before KIND`)
makes the executor stop for good right before carrying out the first action
of that kind, after its intent is journaled, and announce it in `pause_file`:
the deterministic moment to SIGKILL the daemon in the middle of a recovery.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lamplighter.rundir.actions import ActionLog
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.drain_budget import confirm_drain
from lamplighter.slurm.requeue import ALREADY, JobUpdater, requeue_elsewhere, start_elsewhere
from lamplighter.slurm.run import SlurmError
from lamplighter.slurm.step_cgroup import parse_cgroup
from lamplighter.supervisor.metrics import DaemonMetrics
from lamplighter.supervisor.node_policy import NodeAction
from lamplighter.supervisor.recovery import Resolution, recover_pending
from lamplighter.supervisor.state_store import DaemonState, PendingAction
from lamplighter.system import procfs
from lamplighter.system.procfs import same_process

log = logging.getLogger(__name__)

JOURNALED = ("kill_local", "drain", "requeue", "mark_down", "resume")
# A kill leaves srun to end with its tasks: killed first, the step's slurmstepd retries its tasks' exit message
# against the dead srun for about 2.3 s before the job can end (seen in the lab's slurmd logs).
SLURM_CLIENT = "srun"


@dataclass
class Executor:
    state: DaemonState
    api: SlurmApi
    updater: JobUpdater | None
    actions: ActionLog
    metrics: DaemonMetrics | None = None
    proc_root: Path = Path("/proc")
    clock: Callable[[], float] = time.time
    pause_before: str | None = None
    pause_file: Path | None = None
    # (line, job ids): each action line also goes to the run directory of the jobs it concerns (rundir/actions.py)
    job_log: Callable[[str, Sequence[str]], None] | None = None
    observe: bool = False  # decide and log, take no action (node.yaml mode: observe)
    # max_drain_fraction: each drain made is checked against the cluster's one budget (slurm/drain_budget.py)
    drain_budget: float | None = None
    sleep: Callable[[float], None] = time.sleep

    def execute(self, now: float, actions: list[NodeAction]) -> list[dict[str, Any]]:
        """Carry out the actions in order; returns one result per action (also logged)."""
        if self.observe:
            return [self._observe(now, a) for a in actions]
        requeued = {a.target for a in actions if a.kind == "requeue"}
        intents: list[PendingAction | None] = []
        for a in actions:
            intents.append(self._intent(now, a, a.target in requeued) if a.kind in JOURNALED else None)
        results = []
        for a, p in zip(actions, intents, strict=True):
            results.append(self._carry_out(a, p))
        self._unfreeze_failed_requeues(actions, results)
        self._confirm_drains(actions, intents, results)
        return results

    def _confirm_drains(
        self, actions: list[NodeAction], intents: list[PendingAction | None], results: list[dict[str, Any]]
    ) -> None:
        """Each drain made, against the cluster's budget: kept, or undone when others spent it first. After the
        batch, so the wait on slurmctld's clock never delays a requeue (which avoids this node by itself)."""
        if self.drain_budget is None:
            return
        for a, p, r in zip(actions, intents, results, strict=True):
            if a.kind != "drain" or r["outcome"] != "ok" or p is None:
                continue
            claim = confirm_drain(self.api, a.target, self.drain_budget, self.sleep)
            r["budget"] = claim.reason
            if not claim.undone:
                continue
            r["outcome"] = "undone"
            undo = replace(a, kind="resume", reason=claim.reason, jobs=())
            self.state.record_event(
                self.clock(), "drain_undone", {"id": p.id, "target": a.target, "reason": claim.reason}
            )
            self._write(self.clock(), undo, outcome="undone")
            log.warning("%s: %s", a.target, claim.reason)

    def _unfreeze_failed_requeues(self, actions: list[NodeAction], results: list[dict[str, Any]]) -> None:
        """A batch step stopped for a requeue that then failed is killed after all, as before (the head
        requeues a failed group job): stopped, it would hold its job RUNNING for its time limit."""
        failed = {
            a.target for a, r in zip(actions, results, strict=True) if a.kind == "requeue" and r["outcome"] != "ok"
        }
        for a, r in zip(actions, results, strict=True):
            if a.kind != "kill_local" or a.target not in failed:
                continue
            for pid in r.get("batch_step_stopped", []):
                try:
                    os.kill(pid, signal.SIGKILL)  # stopped by this daemon a moment ago: it cannot have exited
                except ProcessLookupError:
                    continue
            if r.get("batch_step_stopped"):
                log.warning("requeue of %s failed: its stopped batch step %s killed", a.target, r["batch_step_stopped"])

    def _intent(self, now: float, a: NodeAction, requeue_follows: bool = False) -> PendingAction:
        before: dict[str, Any] = {}
        if a.kind == "kill_local":
            before = {"pids": [list(p) for p in a.pids], "requeue_follows": requeue_follows}
        elif a.kind == "requeue":
            before = {
                "restarts": self._restarts(a.target),
                "exclude": a.exclude_node,
                "start_at": a.start_at,
                "attempt": a.attempt,
            }
        elif a.kind == "resume" and a.observation.get("mark"):
            before = {"comment": a.observation["mark"]}  # the node Comment the resume leaves (auto_resume.py)
        restart_group = a.group if a.kind == "requeue" else None
        return self.state.record_intent(now, a.kind, a.target, a.reason, a.observation, before, restart_group)

    def _restarts(self, job_id: str) -> int | None:
        try:
            return self.api.job(int(job_id)).restarts
        except SlurmError:
            return None

    def _carry_out(self, a: NodeAction, p: PendingAction | None) -> dict[str, Any]:
        now = self.clock()
        if p is None:
            return self._announce(now, a)
        if self.pause_before == a.kind:
            self._pause(p)
        try:
            result = self._do(a.kind, a.target, a.reason, p.before, now)
            outcome = "ok"
        except (SlurmError, OSError, TimeoutError, ValueError) as e:
            result, outcome = {"error": f"{type(e).__name__}: {e}"}, "failed"
            log.error("action %s %s failed: %s", a.kind, a.target, e)
        self.state.record_done(self.clock(), p.id, outcome, result)
        self._write(now, a, outcome=outcome, result=result, id=p.id)
        by_another = str(result.get("requeue", "")).startswith(ALREADY)
        if outcome == "ok" and a.kind == "requeue" and self.metrics is not None and a.group and not by_another:
            self.metrics.restart(a.group)
        return {"action": a.kind, "target": a.target, "outcome": outcome, **result}

    def _observe(self, now: float, a: NodeAction) -> dict[str, Any]:
        """mode observe: what would have been done, said and kept, and nothing done."""
        if a.kind in ("log", "report"):
            return self._announce(now, a)
        would = replace(a, reason=f"would {a.kind.replace('_', ' ')}: {a.reason}")
        self.state.record_event(
            now, f"would_{a.kind}", {"target": a.target, "reason": would.reason, "observation": a.observation}
        )
        self._write(now, would, outcome="observed")
        log.warning("OBSERVE ONLY: %s %s: %s", a.kind, a.target, would.reason)
        return {"action": a.kind, "target": a.target, "outcome": "observed"}

    def _announce(self, now: float, a: NodeAction) -> dict[str, Any]:
        """give_up, log and report: nothing to do to the world, but said (give_up and log loudly) and kept."""
        if a.kind == "report":
            self._write(now, a, outcome="reported")
            log.warning("%s: %s", a.target, a.reason)
            return {"action": a.kind, "target": a.target, "outcome": "reported"}
        self.state.record_event(now, a.kind, {"target": a.target, "reason": a.reason, "observation": a.observation})
        self._write(now, a, outcome="logged")
        log.error("%s %s: %s", a.kind.upper(), a.target, a.reason)
        return {"action": a.kind, "target": a.target, "outcome": "logged"}

    def _write(self, now: float, a: NodeAction, **extra: Any) -> None:
        """The action's line: to the node's action log, and to the run directory of each job it concerns."""
        if a.group is not None:
            extra["group"] = a.group
        if a.attempt is not None:
            extra["attempt"] = a.attempt
        if a.jobs:
            extra["jobs"] = [{"job_id": j, "group": g, "attempt": n} for j, g, n in a.jobs]
        line = self.actions.write(now, a.kind, a.target, a.reason, a.observation, **extra)
        if self.job_log is not None and a.jobs:
            self.job_log(line, [j for j, _, _ in a.jobs])

    def _do(self, kind: str, target: str, reason: str, before: dict[str, Any], now: float) -> dict[str, Any]:
        if kind == "kill_local":
            return self._kill(before.get("pids", []), bool(before.get("requeue_follows")))
        if kind == "drain":
            self.api.drain(target, reason)
            return {}
        if kind == "mark_down":
            self.api.mark_down(target, reason)
            return {}
        if kind == "resume":
            self.api.resume(target, before.get("comment"))
            return {}
        if kind == "requeue":
            start_at, attempt = before.get("start_at"), before.get("attempt")
            return requeue_elsewhere(
                self.api,
                self.updater,
                int(target),
                before.get("exclude"),
                now if start_at is None else float(start_at),
                now,
                None if attempt is None else int(attempt),
            )
        raise ValueError(f"unknown action kind {kind!r}")

    def _kill(self, pids: list[list[int]], requeue_follows: bool = False) -> dict[str, Any]:
        """SIGKILL each trainer still the one observed, then every process below it.

        torchrun starts its workers in sessions of their own: killing the agent alone leaves them training
        (orphans Slurm's linuxproc tracking no longer sees). Descendants are read before the first signal, so
        an orphan is still known, and each is signalled only if it is still the process read.

        srun is left to end with its tasks (SLURM_CLIENT). When the job's requeue follows, the batch step's
        processes (the batch script, the in-job agent) are stopped, not killed: stopped, the agent restarts
        nothing, and the batch step's end would take srun with it; the requeue ends them (SIGCONT, SIGTERM)."""
        killed: list[int] = []
        gone: list[int] = []
        below: list[int] = []
        left: list[int] = []
        stopped: list[int] = []
        snap = procfs.snapshot(self.proc_root)

        def hit(st: procfs.ProcStat, out: list[int]) -> None:
            if st.comm == SLURM_CLIENT:
                left.append(st.pid)
                return
            batch = requeue_follows and self._in_batch_step(st.pid)
            try:
                os.kill(st.pid, signal.SIGSTOP if batch else signal.SIGKILL)
                (stopped if batch else out).append(st.pid)
            except ProcessLookupError:
                gone.append(st.pid)

        for pid, start in pids:
            if not same_process(self.proc_root, pid, start) or (st0 := snap.get(pid)) is None:
                gone.append(pid)  # exited, or its PID was reused: never signal a stranger
                continue
            descendants = procfs.tree(snap, pid)[1:]
            hit(st0, killed)  # the agent first: it restarts no worker after this
            for st in descendants:
                if same_process(self.proc_root, st.pid, st.start_time):
                    hit(st, below)
        out: dict[str, Any] = {"killed": killed, "already_gone": sorted(set(gone)), "descendants_killed": below}
        if left:
            out["srun_left_to_end"] = sorted(set(left))
        if stopped:
            out["batch_step_stopped"] = sorted(set(stopped))
        return out

    def _in_batch_step(self, pid: int) -> bool:
        text = procfs.read_cgroup(self.proc_root, pid)
        cg = parse_cgroup(text) if text is not None else None
        return cg is not None and cg.step == "batch"

    def _pause(self, p: PendingAction) -> None:
        log.warning("test hook: pausing for good before %s %s (intent %s journaled)", p.kind, p.target, p.id)
        if self.pause_file is not None:
            self.pause_file.write_text(f"{p.id} {p.kind} {p.target}\n")
        while True:
            time.sleep(3600)

    # -- after a restart ------------------------------------------------------------

    def happened(self, p: PendingAction) -> bool:
        """Did the pending action take effect before the daemon died?"""
        try:
            if p.kind == "kill_local":
                return not any(same_process(self.proc_root, pid, st) for pid, st in p.before.get("pids", []))
            if p.kind == "drain":
                return self.api.node(p.target).is_drained
            if p.kind == "mark_down":
                return self.api.node(p.target).is_down
            if p.kind == "resume":
                return not self.api.node(p.target).is_drained
            if p.kind == "requeue":
                before = p.before.get("restarts")
                info = self.api.job(int(p.target))
                if before is None or info.restarts <= int(before):
                    return False
                # Requeued, but the daemon may have died before lifting BeginTime: do that now (idempotent).
                start_elsewhere(self.api, self.updater, int(p.target), p.before.get("exclude"), 0.0)
                return True
        except SlurmError as e:
            if "invalid job id" in e.stderr.lower():
                return True  # Slurm forgot the job: nothing left to do
            raise
        return False

    def recover(self, now: float) -> list[Resolution]:
        """Finish what a killed daemon left pending; each resolution is also one ActionLog line."""

        def redo(p: PendingAction) -> dict[str, Any]:
            return self._do(p.kind, p.target, p.reason, p.before, self.clock())

        out = recover_pending(self.state, now, self.happened, redo, observe=self.observe)
        for r in out:
            a = r.action
            self.actions.write(
                now,
                a.kind,
                a.target,
                a.reason,
                a.observation,
                outcome=r.outcome,
                result=r.detail,
                id=a.id,
                recovered=True,
            )
        return out
