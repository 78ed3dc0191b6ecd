"""`lamplighter local`: the Lighthouse and N replica groups on this machine, supervised, with chaos.

The loop reads the clock once per turn and hands the time to the checks and
the pure policy; it sleeps in the exit watcher, so a process exit wakes it at
once. Chaos faults are injected here and journalled with their timestamps;
at the end the report and the timeline are written from the step logs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from lamplighter.chaos.injector import Targets
from lamplighter.chaos.plan import ChaosSpecError, chaos_plan_text
from lamplighter.configs.job_file import job_file_json
from lamplighter.configs.schema import ChaosConfig, JobConfig
from lamplighter.launch.group import group_launch
from lamplighter.launch.standby_pool import StandbyPool
from lamplighter.lighthouse.progress import LighthouseProgress
from lamplighter.lighthouse.spawn import Lighthouse
from lamplighter.lighthouse.status import LighthouseStatus, fetch_status
from lamplighter.lighthouse.steplog import LighthouseStepLog, read_lighthouse_steps
from lamplighter.local.chaos import LocalChaos
from lamplighter.local.live_view import GroupRow, LiveView
from lamplighter.policy.observations import LighthouseDown, Observation, ProcessExited, StartFailed
from lamplighter.policy.restart import GroupAction, PolicyState, decide
from lamplighter.report.baseline import Baseline
from lamplighter.report.fault_journal import FaultJournal
from lamplighter.report.step_tail import StepTail
from lamplighter.rundir.contract import RunPaths, write_json_atomic
from lamplighter.rundir.stop_at import final_target, read_stop_at
from lamplighter.supervisor.checks.dstate import DStateCheck
from lamplighter.supervisor.checks.exit_watcher import ExitWatcher
from lamplighter.supervisor.checks.hang import HangCheck, progress_sources
from lamplighter.supervisor.checks.memory import MemoryCheck, MemoryCheckError
from lamplighter.supervisor.checks.progress_pace import pace_rule
from lamplighter.system.process_tree import GroupProcesses, StartError
from lamplighter.system.trainer_proc import TrainerProc

LIGHTHOUSE_READY_S = 60.0
MAX_WAIT_S = 0.25  # the loop's longest sleep when nothing happens (chaos timing, live view)


class LocalModeError(RuntimeError):
    """Bad input for local mode (exit code 2); the message says what and why."""


@dataclass
class LocalOptions:
    run_dir: Path
    report_dir: Path
    chaos: ChaosConfig
    live: bool = True
    python: str = sys.executable
    baseline: Baseline | None = None  # a fault-free run's rate, goodput's second yardstick (baseline.py)
    out: TextIO = field(default_factory=lambda: sys.stdout)


class LocalRun:
    def __init__(self, job: JobConfig, opts: LocalOptions, clock: Callable[[], float] = time.time) -> None:
        self.run_dir = opts.run_dir.resolve()
        # {run_dir} in a trainer command is where this run's files go (--run-dir), not the config's default.
        self.job = job.model_copy(update={"run_dir": str(self.run_dir)})
        self.opts, self.clock = opts, clock
        self.paths = RunPaths(self.run_dir)
        n = job.groups.count
        try:
            self.chaos = LocalChaos(opts.chaos, n)
        except ChaosSpecError as e:
            raise LocalModeError(str(e)) from e
        self.state = PolicyState.initial(n)
        self.groups: list[GroupProcesses | None] = [None] * n
        self.journal = FaultJournal()
        self.view = LiveView(opts.out, live=opts.live)
        self.lh = Lighthouse(
            job.lighthouse, self.paths.logs() / "lighthouse.log", remember=self.paths.lighthouse_memory()
        )
        self.watcher: ExitWatcher | None = None
        self.tail = StepTail(self.run_dir, n)
        self.t0 = clock()
        self.t_train: float | None = None  # first commit of the run: chaos times count from here
        self.decisions: list[dict[str, Any]] = []
        self._detected: set[tuple[int | None, int]] = set()
        self._pending: list[Observation] = []
        self.lh_progress = LighthouseProgress(self._fetch_lighthouse)
        self.lh_steps = LighthouseStepLog(self.paths.lighthouse_steps())
        self._progress_error: str | None = None
        self.standbys: StandbyPool | None = None

    def _standby_pool(self) -> StandbyPool | None:
        r = self.job.restart
        if r.standby == 0:
            return None
        env = dict(os.environ)
        env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})  # as trainer_env sets before any import
        env.update(self.job.trainer.env)
        preload = list(r.standby_preload)
        if self.job.trainer.command is None:
            preload.append("lamplighter.trainer.main")  # the reference trainer: its own imports too
        return StandbyPool(
            size=r.standby * self.job.groups.nproc_per_node * self.job.groups.nodes,
            python=self.job.trainer.python or self.opts.python,
            preload=preload,
            env=env,
            log_dir=self.paths.logs(),
            say=self.say,
        )

    def _fetch_lighthouse(self) -> LighthouseStatus:
        # Bounded well below a poll interval: the loop must not stall on a slow Lighthouse.
        return fetch_status(self.lh.address, timeout=min(1.0, self.job.health.poll_interval_s))

    # --- the table the checks read -------------------------------------------------
    def trainers(self) -> list[TrainerProc]:
        out: list[TrainerProc] = []
        for g, gp in enumerate(self.groups):
            if (
                gp is not None
                and self.state.groups[g].status == "running"
                and gp.attempt == self.state.groups[g].attempt
            ):
                out += gp.trainers()
        return out

    # --- actions -------------------------------------------------------------------
    def say(self, text: str) -> None:
        self.view.event(self.clock(), self.t0, text)

    def _start_group(self, g: int, attempt: int) -> bool:
        """Start one attempt of a group; True when its ranks came from warm standbys.

        Its start time is read here, not the turn's: a killed rank's last step, written after the turn read
        the clock and before the exit was seen, would otherwise count as the new attempt's commit (chaos's
        gentle mode then struck the job's only live peer while this group had not yet healed)."""
        # A fault that never fired must not hit the new attempt.
        self.paths.inject_exception(g).unlink(missing_ok=True)
        self.paths.inject_hang_collective(g).unlink(missing_ok=True)
        argv, envs = group_launch(
            self.job,
            group=g,
            attempt=attempt,
            lighthouse=self.lh.address,
            config_path=self.run_dir / "job.json",
            run_dir=self.run_dir,
            python=self.opts.python,
        )
        log_path = self.paths.logs() / f"group{g}.log"
        now = self.clock()
        popens = None
        if self.standbys is not None and attempt > 0:
            popens = self.standbys.take(argv, envs, cwd=Path.cwd(), log_path=log_path)
        if popens is not None:
            gp = GroupProcesses.adopt(
                group=g, attempt=attempt, popens=popens, log_path=log_path, started_at=now, env=envs[0]
            )
        else:
            gp = GroupProcesses.start(group=g, attempt=attempt, argv=argv, envs=envs, log_path=log_path, started_at=now)
        self.groups[g] = gp
        assert self.watcher is not None
        for t in gp.trainers():
            self.watcher.watch_trainer(t)
        return popens is not None

    def _kill_group(self, g: int) -> None:
        gp = self.groups[g]
        if gp is not None:
            gp.kill()

    def _apply(self, d: GroupAction, now: float) -> list[Observation]:
        """Carry out one decision; a failed start comes back as an observation."""
        self.decisions.append({"t": now, "action": d.action, "group": d.group, "reason": d.reason})
        if d.action == "kill" and d.group is not None:
            self._kill_group(d.group)
            self.say(f"kill group {d.group}: {d.reason}")
        elif d.action == "restart" and d.group is not None:
            attempt = self.state.groups[d.group].attempt
            try:
                warm = self._start_group(d.group, attempt)
            except StartError as e:
                return [StartFailed(group=d.group, attempt=attempt, message=str(e))]
            # The group's own start, for the same reason: the report counts its first commit after it.
            self.journal.restarted(d.group, self._started_at(d.group), warm)
            self.decisions[-1]["warm"] = warm
            self.say(f"restarted group {d.group} (attempt {attempt}{', from a warm standby' if warm else ''})")
        elif d.action == "restart_lighthouse":
            self.lh.kill()
            pid = self.lh.start(now)
            assert self.watcher is not None
            self.watcher.watch_lighthouse(pid)
            self.journal.restarted(None, now)
            self.say(f"restarted the Lighthouse on {self.lh.address} (pid {pid})")
        elif d.action in ("give_up", "stop", "done", "finish"):
            self.say(f"{d.action.replace('_', ' ')}{'' if d.group is None else f' group {d.group}'}: {d.reason}")
        return []

    # --- the loop ------------------------------------------------------------------
    def _targets(self) -> Targets:
        present = [
            g
            for g, gp in enumerate(self.groups)
            if gp is not None
            and self.state.groups[g].status == "running"
            and gp.attempt == self.state.groups[g].attempt
        ]
        # A group struck in its current attempt (SIGSTOPped, an exception on its way) may still show
        # its last commit: it is not healthy until its restart commits.
        struck = {(f.group, f.attempt) for f in self.journal.faults if f.t_injected is not None}
        healthy = [
            g
            for g in present
            if (g, self.state.groups[g].attempt) not in struck and self.tail.committed_since(g, self._started_at(g))
        ]
        lh_start = self.lh.started_at or 0.0
        lh_ok = self.state.lighthouse.status == "running" and any(
            self.tail.committed_since(g, lh_start) for g in healthy
        )
        spares = self.standbys is None or self.standbys.full_and_ready()
        return Targets(healthy=healthy, present=present, lighthouse_healthy=lh_ok, spares_ready=spares)

    def _started_at(self, g: int) -> float:
        gp = self.groups[g]
        assert gp is not None
        return gp.started_at

    def _journal_detections(self, obs: list[Observation], now: float) -> None:
        for o in obs:
            if isinstance(o, LighthouseDown):
                key: tuple[int | None, int] = (None, self.state.lighthouse.attempt)
                live = self.state.lighthouse.status == "running"
            else:
                gs = self.state.groups[o.group]
                key = (o.group, o.attempt)
                live = gs.status == "running" and gs.attempt == o.attempt
                if isinstance(o, ProcessExited) and o.returncode == 0:
                    continue
            if live and key not in self._detected:
                self._detected.add(key)
                t = o.t if isinstance(o, (ProcessExited, LighthouseDown)) else now
                self.journal.detected(key[0], key[1], t, o.reason)

    def prepare(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if any((self.run_dir / d).exists() for d in ("steps", "progress", "heartbeat", self.lh_steps.path.name)):
            raise LocalModeError(
                f"run directory {self.run_dir} holds a previous run (steps/, progress/): a restarted trainer would "
                "see its progress. Choose another --run-dir or remove it."
            )
        (self.run_dir / "job.json").write_text(job_file_json(self.job))

    def run(self) -> dict[str, Any]:
        self.prepare()
        self.watcher = ExitWatcher(self.clock)
        h = self.job.health
        sources, _ = progress_sources(h.progress, self.run_dir, self.lh_progress)
        hang = HangCheck(
            self,
            sources,
            h.hang_timeout_s,
            h.startup_timeout_s,
            excused_since=lambda: self.lh.started_at or 0.0,
            target_step=self.job.trainer.steps,
            pace_rule=pace_rule(h),
        )
        dstate = DStateCheck(self, h.d_state_max_s)
        memory = MemoryCheck(self, h.memory_max_percent)
        interrupted = False
        try:
            self.paths.lighthouse_memory().unlink(missing_ok=True)  # a run before this one's replicas
            self.watcher.watch_lighthouse(self.lh.start(self.clock()))
            self.lh.wait_ready(LIGHTHOUSE_READY_S)
            write_json_atomic(self.paths.lighthouse(), {"address": self.lh.address, "job": self.job.name})
            self.say(
                f"Lighthouse up on {self.lh.address}; starting {self.job.groups.count} groups, target "
                f"{self.job.trainer.steps} steps, {chaos_plan_text(self.opts.chaos, self.job.groups.count)}"
            )
            for g in range(self.job.groups.count):
                self._start_group(g, 0)
            self.standbys = self._standby_pool()
            next_check = 0.0
            while not self.state.finished:
                now = self.clock()
                obs: list[Observation] = self._pending + self.watcher.observe(now)
                self._pending = []
                if now >= next_check:
                    next_check = now + h.poll_interval_s
                    hang.target_step = self._target()
                    obs += [*hang.observe(now), *dstate.observe(now)]
                    self._note_lighthouse(now)
                    try:
                        obs += memory.observe(now)
                    except MemoryCheckError as e:
                        self.say(f"WARNING: {e}")
                self.tail.poll()
                if self.t_train is None:
                    firsts = [gp.first_commit_t for gp in self.tail.groups if gp.first_commit_t]
                    self.t_train = min(firsts) if firsts else None
                # What was seen this turn happened before any fault injected in it.
                self._journal_detections(obs, now)
                if self.t_train is not None and self.state.finishing_since is None:
                    self.chaos.maybe_strike(self, self.clock() - self.t_train, self._targets())
                verdict = decide(now, self.state, obs, self.job.restart)
                self.state = verdict.state
                for d in verdict.decisions:
                    failed = self._apply(d, now)
                    self._pending += failed  # a failed start is a failure like any other, decided next turn
                if self.standbys is not None:
                    self.standbys.refill(quiet=self._quiet())
                self._draw(now)
                self.watcher.wait(
                    max(
                        0.0, min(next_check, self.chaos.next_at(self.t_train), self.clock() + MAX_WAIT_S) - self.clock()
                    )
                )
        except KeyboardInterrupt as e:
            interrupted = True
            by = f" by {e}" if str(e) else ""  # Terminated names its signal; Ctrl-C's has no text
            self.say(f"interrupted{by}: stopping the groups and the Lighthouse")
        finally:
            for g in range(len(self.groups)):
                self._kill_group(g)
            self.lh.kill()
            self.watcher.close()
            if self.standbys is not None:
                self.standbys.close()
        return self._finish(interrupted)

    def _quiet(self) -> bool:
        """No group is starting: every running group has committed since it started (a standby's imports
        would take the CPU from a trainer on its way back)."""
        t = self._targets()
        running = [g for g, gs in enumerate(self.state.groups) if gs.status == "running"]
        return bool(t.present) and set(t.healthy) == set(t.present) == set(running)

    def _target(self) -> int:
        """trainer.steps, or the step the owner told the running job to stop at (the run dir's stop-at)."""
        return final_target(self.job.trainer.steps, read_stop_at(self.run_dir))

    def _note_lighthouse(self, now: float) -> None:
        """Record the Lighthouse's steps (the report of a trainer that logs none), say once when it cannot be read."""
        if self.lh_progress.polled_at != now:
            self.lh_progress.refresh(now)  # health.progress without the Lighthouse: still read it for the report
        err = self.lh_progress.error
        if err != self._progress_error and self.state.lighthouse.status == "running":
            self.say(f"WARNING: cannot read the Lighthouse's progress: {err}" if err else "Lighthouse readable again")
        self._progress_error = err
        if self.lh_progress.last is not None and err is None:
            self.lh_steps.record(now, self.lh_progress.last)

    def _draw(self, now: float) -> None:
        rows = []
        for g, gs in enumerate(self.state.groups):
            p = self.tail.groups[g]
            state: str = gs.status
            if state == "running" and p.last is not None and p.last.healed_from and p.last.attempt == gs.attempt:
                state = "healed"
            rows.append(GroupRow(group=g, state=state, restarts=gs.restarts, progress=p))
        lh = f"{self.lh.address} ({self.state.lighthouse.status}, restarts {self.state.lighthouse.restarts})"
        self.view.update(
            now,
            self.t0,
            rows,
            self.tail.steps_per_s(now),
            self._target(),
            lh,
            len([f for f in self.journal.faults if f.kind != "unplanned"]),
        )

    def _finish(self, interrupted: bool) -> dict[str, Any]:
        from lamplighter.report.build import build_report
        from lamplighter.report.summary import summary_text
        from lamplighter.rundir.steplog import read_steps

        groups = range(self.job.groups.count)
        by_group = {g: read_steps(self.paths.steps(g)) for g in groups}
        steps_source = "trainer step logs"
        if not any(by_group.values()):
            by_group = read_lighthouse_steps(self.lh_steps.path, groups)
            steps_source = "the Lighthouse (the trainer keeps no step log)"
        t_end = self.clock()
        report = build_report(
            by_group,
            self.journal.faults,
            target_steps=self.job.trainer.steps,
            t_start=self.t0,
            t_end=t_end,
            stop_at=read_stop_at(self.run_dir),
            baseline_samples_per_s=None if self.opts.baseline is None else self.opts.baseline.samples_per_s,
            baseline_source="" if self.opts.baseline is None else self.opts.baseline.source,
            extra={
                "job": self.job.name,
                "steps_source": steps_source,
                "run_dir": str(self.run_dir),
                "lighthouse": self.lh.address,
                "interrupted": interrupted,
                "t_training_started": self.t_train,
                "group_status": {
                    str(g): {"status": gs.status, "restarts": gs.restarts, "reason": gs.reason}
                    for g, gs in enumerate(self.state.groups)
                },
                "lighthouse_restarts": self.state.lighthouse.restarts,
                # Faults planned up to when injection stopped: the job finishing, or its end.
                **self.chaos.tally(
                    self.t_train,
                    t_end if self.state.finishing_since is None else min(t_end, self.state.finishing_since),
                ),
                "decisions": self.decisions,
                "standby": None
                if self.standbys is None
                else {
                    "size": self.standbys.size,
                    "started": self.standbys.started,
                    "used": self.standbys.used,
                    "used_before_ready": self.standbys.used_before_ready,
                    "cold_reasons": sorted(self.standbys.cold_reasons),
                },
            },
        )
        if by_group is not None and steps_source.startswith("the Lighthouse"):
            # The Lighthouse learns a step at the next quorum, so a trainer's last step is never seen there:
            # the target counts as reached when every group ended with exit 0 (its own verdict).
            report["reached_target"] = all(gs.status == "done" for gs in self.state.groups)
            report["reached_target_by"] = "every group exited 0 (the Lighthouse does not see a trainer's last step)"
        self.opts.report_dir.mkdir(parents=True, exist_ok=True)
        try:
            from lamplighter.report.timeline import plot_timeline

            plot_timeline(by_group, report, self.opts.report_dir / "timeline.png")
            report["timeline"] = str(self.opts.report_dir / "timeline.png")
        except Exception as e:  # a missing plot must not cost the report
            report["timeline"] = None
            report["timeline_error"] = f"{type(e).__name__}: {e}"
        write_json_atomic(self.opts.report_dir / "report.json", report)
        print(summary_text(report, self.opts.report_dir), file=self.opts.out, flush=True)
        return report
