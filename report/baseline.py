"""A fault-free run's rate, goodput's second yardstick (`--baseline`): given, read from a run, or measured first.

The first yardstick is the run's own steady rate (steady_rate.py); this one
lets a skeptic compare with a run that had no fault at all. A baseline read from a report must
come from a run of the same length and group count, with no fault at all
(planned or not), that reached its target: warm-up weighs differently in a
shorter run, and a run that restarted a group was not fault-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AUTO = "auto"


class BaselineError(ValueError):
    """A --baseline that cannot be used; the message says which value and why."""


@dataclass(frozen=True)
class Baseline:
    samples_per_s: float
    source: str


@dataclass(frozen=True)
class BaselineSpec:
    """What --baseline asked for: a rate, a report to read, or AUTO (a fault-free run first)."""

    rate: float | None = None
    report: Path | None = None
    auto: bool = False


def parse_baseline(value: str) -> BaselineSpec:
    if value == AUTO:
        return BaselineSpec(auto=True)
    try:
        rate = float(value)
    except ValueError:
        return BaselineSpec(report=Path(value))
    if not rate > 0:
        raise BaselineError(f"--baseline {value}: a fault-free rate is a positive number of samples/s")
    return BaselineSpec(rate=rate)


def from_report(report: dict[str, Any], where: str, *, target_steps: int, groups: int) -> Baseline:
    """The useful rate of a fault-free run's report, after checking it is one and fits this job."""
    faults = report.get("faults") or []
    if faults:
        kinds = sorted({str(f.get("kind")) for f in faults})
        raise BaselineError(f"{where}: not a fault-free run ({len(faults)} fault(s): {', '.join(kinds)})")
    if not report.get("reached_target"):
        raise BaselineError(f"{where}: the run did not reach its target, so its rate is not a baseline")
    if report.get("target_steps") != target_steps:
        raise BaselineError(
            f"{where}: a run of {report.get('target_steps')} steps, this job has {target_steps}: "
            "warm-up weighs differently in runs of different lengths"
        )
    their_groups = len(report.get("groups") or {})
    if their_groups != groups:
        raise BaselineError(f"{where}: a run of {their_groups} groups, this job has {groups}")
    rate = report.get("useful_samples_per_s") or report.get("committed_samples_per_s")
    if not isinstance(rate, (int, float)) or rate <= 0:
        raise BaselineError(f"{where}: no committed samples per second in the report")
    return Baseline(float(rate), f"fault-free run {where}")


def read_report(path: Path, *, target_steps: int, groups: int) -> Baseline:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise BaselineError(f"--baseline {path}: {e.strerror or e}") from e
    except ValueError as e:
        raise BaselineError(f"--baseline {path}: not a report.json ({e})") from e
    if not isinstance(data, dict):
        raise BaselineError(f"--baseline {path}: not a report.json")
    return from_report(data, str(path), target_steps=target_steps, groups=groups)
