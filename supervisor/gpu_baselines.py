"""GPU error-counter baselines kept in the daemon's state, so a restarted daemon still sees errors that grew meanwhile.

A GPU's counters are cumulative; the check reports the increase over the
baseline it took when it started watching. Were the baseline taken afresh
after a daemon restart, an uncorrectable error that happened while the daemon
was down would become part of the new baseline and never be reported. So the
first baseline of each GPU (and every later change: a counter cleared by a
driver reload is followed down) is journaled, keyed by the GPU's BDF, and
handed back to the GPU check on start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from lamplighter.supervisor.gpu.assess import Baseline
from lamplighter.supervisor.state_store import DaemonState

KEY_PREFIX = "gpu:"
_FIELDS = tuple(f.name for f in dataclasses.fields(Baseline))


def _counter(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def restore(state: DaemonState) -> dict[str, Baseline]:
    """The persisted baselines by BDF (entries that are not GPU baselines are left alone)."""
    out: dict[str, Baseline] = {}
    for key, values in state.baselines().items():
        if key.startswith(KEY_PREFIX) and isinstance(values, dict):
            out[key[len(KEY_PREFIX) :]] = Baseline(**{f: _counter(values.get(f)) for f in _FIELDS})
    return out


def persister(state: DaemonState) -> Callable[[float, str, Baseline], None]:
    """The GpuCheck on_baseline callback: one journal record per change."""

    def persist(now: float, bdf: str, baseline: Baseline) -> None:
        state.set_baseline(now, KEY_PREFIX + bdf, dataclasses.asdict(baseline))

    return persist
