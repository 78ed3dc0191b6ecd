"""The supervisor's GPU check: one killable amdsmi worker per GPU, probed under a hard deadline.

Why one worker per GPU: a hung driver call cannot be interrupted inside the
calling process, and it blocks every later call in that process. With one
process per GPU, a wedged GPU 3 stalls only GPU 3's worker; GPUs 0-2 and 4-7
keep being read with no fallback logic. The cost is N small idle processes
(each did amdsmi_init once; probing is a pipe round-trip). A worker that
overruns the deadline is SIGKILLed, the GPU is reported unresponsive, and a
fresh worker is started (its amdsmi_init blocks too while the GPU is wedged;
that start is under a deadline of its own).

observe(now) never waits on a worker beyond `collect_s`, and only for
requests made in this call: a reply that arrives later is used by a later
call. `now` is the caller's clock for deadlines; `clock` only bounds the wait.

Baselines (the error counters when watching began) can outlive the check:
`baselines` seeds them by BDF (a GPU's index can change across reboots, its
BDF does not), and `on_baseline(now, bdf, baseline)` hears every change, so a
restarted supervisor still counts errors that grew while it was down.
"""

from __future__ import annotations

import selectors
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lamplighter.configs.schema import NodeHealthConfig
from lamplighter.supervisor.gpu.assess import Baseline, assess
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.gpu.worker import ProbeWorker, WorkerSpec

INSTALL_PROBLEM = "amdsmi-install"  # the worker's kind for a missing or mismatched amdsmi
INSTALL_RETRY_S = 60.0


@dataclass
class _Gpu:
    worker: ProbeWorker
    baseline: Baseline = field(default_factory=Baseline)
    last: GpuObservation | None = None
    retry_at: float = 0.0
    fresh: GpuObservation | None = None  # produced during the current observe()


class GpuCheck:
    """Observes every GPU of the node once per call; see the module docstring."""

    def __init__(
        self,
        health: NodeHealthConfig,
        spec: WorkerSpec,
        expected_gpus: int | None = None,
        collect_s: float = 0.25,
        start_deadline_s: float | None = None,
        respawn_after_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        baselines: Mapping[str, Baseline] | None = None,
        on_baseline: Callable[[float, str, Baseline], None] | None = None,
        first_baseline: Baseline | None = None,
    ) -> None:
        self.health = health
        self.spec = spec
        self.expected = expected_gpus
        self.collect_s = collect_s
        # Starting a worker (Python, import amdsmi, amdsmi_init) takes longer than a probe.
        self.start_deadline_s = start_deadline_s if start_deadline_s is not None else max(10.0, health.probe_deadline_s)
        self.respawn_after_s = respawn_after_s
        self.clock = clock
        self.baselines = dict(baselines or {})  # by BDF: taken by an earlier check of this node
        self.on_baseline = on_baseline
        # For a GPU with no persisted baseline: None takes the first reading; a one-shot check passes
        # zero ECC counts, so errors since the driver loaded count (check_once.py).
        self.first_baseline = first_baseline
        self.gpus: dict[int, _Gpu] = {}
        self.enumerated: int | None = None

    def observe(self, now: float) -> list[GpuObservation]:
        if not self.gpus:
            for i in range(self.expected or 1):  # without a count, GPU 0's worker discovers it
                self.gpus[i] = _Gpu(ProbeWorker(i, self.spec))
        waiting: set[int] = set()
        for i, g in self.gpus.items():
            g.fresh = None
            g.worker.reap()
            self._kick(i, g, now, waiting)
        self._collect(now, waiting)
        for i, g in self.gpus.items():
            self._check_deadline(i, g, now)
        return [self._report(i, g, now) for i, g in sorted(self.gpus.items())]

    def close(self) -> None:
        for g in self.gpus.values():
            g.worker.kill()
            g.worker.reap()

    # -- one GPU's conversation ------------------------------------------------

    def _kick(self, i: int, g: _Gpu, now: float, waiting: set[int]) -> None:
        w = g.worker
        if w.state == "dead" and now >= g.retry_at:
            w.start(now)
            waiting.add(i)
        elif w.state == "idle":
            if w.request(now):
                waiting.add(i)
            else:
                self._crashed(i, g, now, "worker pipe closed")

    def _collect(self, now: float, waiting: set[int]) -> None:
        end = self.clock() + self.collect_s
        with selectors.DefaultSelector() as sel:
            for i in list(self.gpus):
                fd = self.gpus[i].worker.fileno()
                if fd is not None:
                    sel.register(fd, selectors.EVENT_READ, i)
            while True:
                # Replies from earlier cycles' requests are taken if already there, never waited for.
                left = end - self.clock() if waiting else 0.0
                for key, _ in sel.select(timeout=max(0.0, left)):
                    i = key.data
                    if self._on_readable(i, self.gpus[i], now, waiting):
                        sel.unregister(key.fd)
                for i in list(self.gpus):  # workers discovered during this collect
                    g = self.gpus[i]
                    fd = g.worker.fileno()
                    if fd is not None and i in waiting and not self._registered(sel, fd):
                        sel.register(fd, selectors.EVENT_READ, i)
                if not waiting or self.clock() >= end:
                    return

    @staticmethod
    def _registered(sel: selectors.BaseSelector, fd: int) -> bool:
        try:
            sel.get_key(fd)
            return True
        except KeyError:
            return False

    def _on_readable(self, i: int, g: _Gpu, now: float, waiting: set[int]) -> bool:
        """Handle the worker's messages; True if its pipe is finished."""
        msgs, eof = g.worker.read_messages()
        for msg in msgs:
            self._on_message(i, g, msg, now, waiting)
        if eof and g.worker.state != "dead":
            code = g.worker.proc.poll() if g.worker.proc is not None else None
            self._crashed(i, g, now, f"worker exited (code {code})")
        if g.worker.state == "dead":
            waiting.discard(i)
            return True
        return False

    def _on_message(self, i: int, g: _Gpu, msg: dict[str, Any], now: float, waiting: set[int]) -> None:
        w = g.worker
        kind = msg.get("type")
        if kind == "ready":
            w.bdf = str(msg["bdf"])
            self._discovered(int(msg.get("count", 0)), now, waiting)
            w.state = "idle"
            if w.request(now):  # first probe at once, within this cycle
                waiting.add(i)
            return
        if kind == "reading":
            if g.baseline == Baseline() and w.bdf in self.baselines:
                g.baseline = self.baselines[w.bdf]  # first reading: carry on from the persisted baseline
            elif g.baseline == Baseline() and self.first_baseline is not None:
                g.baseline = self.first_baseline
            before = g.baseline
            obs, g.baseline = assess(i, w.bdf, msg, g.baseline, self.health)
            if g.baseline != before and w.bdf is not None:
                self.baselines[w.bdf] = g.baseline
                if self.on_baseline is not None:
                    self.on_baseline(now, w.bdf, g.baseline)
            g.fresh = g.last = obs
            w.state = "idle"
            waiting.discard(i)
            return
        name = f"GPU {i}" + (f" ({w.bdf})" if w.bdf else "")
        retry = self.respawn_after_s
        if kind == "lost":
            obs = GpuObservation(i, "fault", "lost", f"{name} lost: {msg.get('message')}", {"bdf": w.bdf})
        else:
            why = str(msg.get("kind") or "probe-error")
            obs = GpuObservation(i, "unknown", why, f"{name} health unknown: {msg.get('message')}", {"bdf": w.bdf})
            if why == INSTALL_PROBLEM:
                retry = max(retry, INSTALL_RETRY_S)  # fixed by a person, not by retrying every few seconds
        g.fresh = g.last = obs
        w.kill()
        g.retry_at = now + retry
        waiting.discard(i)

    def _discovered(self, count: int, now: float, waiting: set[int]) -> None:
        if self.enumerated is None:
            self.enumerated = count
        target = self.expected if self.expected is not None else count
        for j in range(target):
            if j not in self.gpus:
                g = _Gpu(ProbeWorker(j, self.spec))
                self.gpus[j] = g
                g.worker.start(now)
                waiting.add(j)

    def _crashed(self, i: int, g: _Gpu, now: float, why: str) -> None:
        name = f"GPU {i}" + (f" ({g.worker.bdf})" if g.worker.bdf else "")
        g.fresh = g.last = GpuObservation(
            i, "unknown", "probe-error", f"{name} health unknown: {why}", {"bdf": g.worker.bdf}
        )
        g.worker.kill()
        g.retry_at = now + self.respawn_after_s

    def _check_deadline(self, i: int, g: _Gpu, now: float) -> None:
        w = g.worker
        name = f"GPU {i}" + (f" ({w.bdf})" if w.bdf else "")
        if w.state == "busy" and now - w.since > self.health.probe_deadline_s:
            what, kind, limit = "amdsmi probe", "probe-timeout", self.health.probe_deadline_s
        elif w.state == "starting" and now - w.since > self.start_deadline_s:
            what, kind, limit = "amdsmi_init", "init-timeout", self.start_deadline_s
        else:
            return
        pid = w.pid
        reason = (
            f"{name} unresponsive: {what} did not return within {limit:g} s (worker pid {pid} killed; wedged driver?)"
        )
        g.fresh = g.last = GpuObservation(
            i, "unresponsive", kind, reason, {"bdf": w.bdf, "waited_s": round(now - w.since, 3), "deadline_s": limit}
        )
        w.kill()
        g.retry_at = now  # start a fresh worker next cycle

    def _report(self, i: int, g: _Gpu, now: float) -> GpuObservation:
        if g.fresh is not None:
            return g.fresh
        w = g.worker
        # A known problem stays reported until a new reading clears it.
        if g.last is not None and g.last.status in ("fault", "unresponsive"):
            return g.last
        name = f"GPU {i}" + (f" ({w.bdf})" if w.bdf else "")
        if w.state == "busy":
            return GpuObservation(
                i,
                "unknown",
                "probe-pending",
                f"{name} probe running for {now - w.since:.1f} s (deadline {self.health.probe_deadline_s:g} s)",
                {"bdf": w.bdf},
            )
        if w.state == "starting":
            return GpuObservation(i, "unknown", "starting", f"{name} probe worker starting", {"bdf": w.bdf})
        if g.last is not None:
            return g.last
        return GpuObservation(i, "unknown", "starting", f"{name} not probed yet", {"bdf": w.bdf})
