"""local mode's chaos harness: the plan's faults, each done to this machine's processes when it is due.

The plan and which fault fires on whom are chaos/'s (pure); this does the harm (a signal to a group's
tree or the Lighthouse, an inject file a trainer takes) and journals each fault right before it, so that
detection latency starts at the harm. The run it hurts is handed in; supervision knows nothing of this.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lamplighter.chaos.injector import ChaosInjector, Shot, Targets
from lamplighter.chaos.plan import LOCAL_KINDS, ChaosSpecError, is_random, plan
from lamplighter.configs.schema import ChaosConfig
from lamplighter.report.fault_journal import FaultRecord

if TYPE_CHECKING:
    from lamplighter.local.run import LocalRun


class LocalChaos:
    def __init__(self, cfg: ChaosConfig, groups: int) -> None:
        unsupported = sorted({e.kind for e in cfg.schedule} | set(cfg.kinds if cfg.mtbf_s else []))
        unsupported = [k for k in unsupported if k not in LOCAL_KINDS]
        if cfg.enabled and unsupported:
            raise ChaosSpecError(
                f"chaos kinds {unsupported} cannot be injected in local mode (supported: {', '.join(LOCAL_KINDS)})"
            )
        self.cfg, self.groups = cfg, groups
        self.injector = ChaosInjector(plan(cfg, groups), cfg.seed, cfg.resolved_mode)
        self.missed: list[dict[str, Any]] = []  # exact-mode faults whose target had no process

    def maybe_strike(self, run: LocalRun, since_train_s: float, targets: Targets) -> None:
        """The fault due now, if any, done to the run."""
        shot = self.injector.due(since_train_s, targets)
        if shot is not None:
            self._strike(run, shot)

    def next_at(self, t_train: float | None) -> float:
        """When the next planned fault is due (a loop turn wakes for it: exact schedules fire on time)."""
        at = self.injector.next_at_s()
        return float("inf") if at is None or t_train is None else t_train + at

    def tally(self, t_train: float | None, stop: float) -> dict[str, Any]:
        """What chaos did within the run: faults planned up to `stop` (the job finishing, or its end), how
        many fired; for a schedule, how many of its events fell after that. A random plan was drawn only
        that far: it has no count beyond the run."""
        unfired = 0 if t_train is None else self.injector.unfired_by(stop - t_train)
        planned = self.injector.fired + unfired
        after = None
        if self.cfg.enabled and not is_random(self.cfg):
            after = sum(1 for _ in plan(self.cfg, self.groups)) - planned
        return {
            "chaos_plan": None if not self.cfg.enabled else "random" if is_random(self.cfg) else "schedule",
            "chaos_planned": planned,
            "chaos_struck": self.injector.fired - len(self.missed),
            "chaos_not_injected": unfired,
            "chaos_after_end": after,
            "chaos_mode": self.injector.mode,
            "chaos_missed": self.missed,
        }

    def _strike(self, run: LocalRun, shot: Shot) -> None:
        kind, g = shot.fault.kind, shot.group
        if shot.missed is not None:
            self.missed.append({"kind": kind, "planned_at_s": shot.fault.at_s, "why": shot.missed})
            run.say(f"CHAOS #{shot.index + 1}: {kind} hits nothing: {shot.missed}")
            return
        attempt = run.state.lighthouse.attempt if g is None else run.state.groups[g].attempt
        act = self._harm(run, kind, g)
        # Stamped right before the signal (not the loop turn's time): detection latency starts here.
        t = run.clock()
        act()
        run.journal.injected(
            FaultRecord(
                kind=kind,
                group=g,
                planned_at_s=shot.fault.at_s,
                t_injected=t,
                attempt=attempt,
                t_planned=None if run.t_train is None else run.t_train + shot.fault.at_s,
            )
        )
        run.say(f"CHAOS #{shot.index + 1}: {kind} -> {'the Lighthouse' if g is None else f'group {g}'}")

    @staticmethod
    def _harm(run: LocalRun, kind: str, g: int | None) -> Callable[[], object]:
        if kind == "lighthouse-kill":
            popen = run.lh.popen
            return lambda: None if popen is None else popen.send_signal(signal.SIGKILL)
        assert g is not None
        gp = run.groups[g]
        assert gp is not None
        if kind in ("kill", "hang"):
            sig = signal.SIGKILL if kind == "kill" else signal.SIGSTOP
            return lambda: gp.signal(sig)
        assert kind in ("exception", "hang-collective"), kind
        path = run.paths.inject_exception(g) if kind == "exception" else run.paths.inject_hang_collective(g)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.touch
