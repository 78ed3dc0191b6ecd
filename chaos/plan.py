"""Fault injection plans: parsing `--chaos`, and the schedule a seed gives.

`--chaos mtbf=20s[,seed=N][,kinds=kill,hang,exception,lighthouse-kill][,start=10s][,max=N][,mode=exact]`
draws faults at random (exponential gaps with that mean), `--chaos @file.yaml`
reads a file holding either a list of events (`- {at_s: 15, kind: kill, group: 1}`)
or a mapping with the keys of the `chaos:` section. `mode` (injector.py):
exact fires each fault at its time whatever its target's state, gentle waits
for a healthy target; schedules default to exact, random draws to gentle. Everything here is pure:
the same config and seed always give the same plan. A random plan has no end (but max=N): a run
takes its faults as its clock reaches them, so none is drawn past the run's end.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from lamplighter.configs.schema import ChaosConfig, ChaosKind

# Kinds local mode can inject today; gpu/node-crash/supervisor-kill need the GPU simulator or Slurm.
LOCAL_KINDS: tuple[str, ...] = ("kill", "hang", "hang-collective", "exception", "lighthouse-kill")
ALL_KINDS: tuple[str, ...] = get_args(ChaosKind)
# Kinds that hit the job as a whole (the Lighthouse, the Slurm controller), not one group.
UNTARGETED_KINDS: tuple[str, ...] = ("lighthouse-kill", "slurmctld-restart")


class ChaosSpecError(ValueError):
    """A --chaos value or schedule file that cannot be used; the message says which part and why."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """'500ms', '20s', '1.5m', '2h' or a bare number of seconds."""
    m = _DURATION.match(text)
    if not m:
        raise ChaosSpecError(f"{text!r} is not a duration (like 500ms, 20s, 1.5m, 2h)")
    scale = {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0, "h": 3600.0}[m.group(2)]
    return float(m.group(1)) * scale


def parse_chaos(spec: str, *, base_dir: Path | None = None) -> ChaosConfig:
    """A ChaosConfig (enabled) from a --chaos value."""
    spec = spec.strip()
    if spec.startswith("@"):
        return load_schedule_file((base_dir or Path.cwd()) / spec[1:])
    fields: dict[str, Any] = {"enabled": True}
    last_key = ""
    for token in (t.strip() for t in spec.split(",")):
        if not token:
            continue
        key, eq, value = token.partition("=")
        if not eq:
            if last_key != "kinds":  # 'kinds=kill,hang': later kinds come without a key
                raise ChaosSpecError(f"--chaos {spec!r}: {token!r} is not key=value")
            fields["kinds"].append(_kind(token, spec))
            continue
        key = key.strip()
        last_key = key
        if key == "mtbf":
            fields["mtbf_s"] = parse_duration(value)
        elif key == "seed":
            fields["seed"] = _int(value, key, spec)
        elif key == "kinds":
            fields["kinds"] = [_kind(value, spec)]
        elif key in ("start", "start_after"):
            fields["start_after_s"] = parse_duration(value)
        elif key in ("max", "max_faults"):
            fields["max_faults"] = _int(value, key, spec)
        elif key == "mode":
            if value not in ("exact", "gentle"):
                raise ChaosSpecError(f"--chaos {spec!r}: mode={value!r}: exact or gentle")
            fields["mode"] = value
        else:
            raise ChaosSpecError(f"--chaos {spec!r}: unknown key {key!r} (mtbf, seed, kinds, start, max, mode)")
    if "mtbf_s" not in fields:
        raise ChaosSpecError(f"--chaos {spec!r}: give mtbf=DURATION, or @file.yaml for a schedule")
    try:
        return ChaosConfig(**fields)
    except ValidationError as e:
        raise ChaosSpecError(f"--chaos {spec!r}: {e}") from e


def _int(value: str, key: str, spec: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ChaosSpecError(f"--chaos {spec!r}: {key}={value!r} is not an integer") from None


def _kind(value: str, spec: str) -> str:
    value = value.strip()
    if value not in ALL_KINDS:
        raise ChaosSpecError(f"--chaos {spec!r}: unknown fault kind {value!r} (known: {', '.join(ALL_KINDS)})")
    return value


def load_schedule_file(path: Path) -> ChaosConfig:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ChaosSpecError(f"chaos schedule {path}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise ChaosSpecError(f"chaos schedule {path}: not valid YAML: {e}") from e
    if isinstance(data, list):
        data = {"schedule": data}
    if not isinstance(data, dict):
        raise ChaosSpecError(
            f"chaos schedule {path}: expected a list of events or a mapping, got {type(data).__name__}"
        )
    data.setdefault("enabled", True)
    try:
        cfg = ChaosConfig(**data)
    except ValidationError as e:
        raise ChaosSpecError(f"chaos schedule {path}: {e}") from e
    if not cfg.schedule and cfg.mtbf_s is None:
        raise ChaosSpecError(f"chaos schedule {path}: no events and no mtbf_s")
    return cfg


@dataclass(frozen=True)
class PlannedFault:
    """One fault to inject `at_s` seconds after training starts; group None: any healthy group.
    mode None: the injector's (the schedule's) mode."""

    at_s: float
    kind: str
    group: int | None
    mode: str | None = None


def plan(cfg: ChaosConfig, n_groups: int) -> Iterator[PlannedFault]:
    """The faults this config injects, in time order. Explicit schedules win over mtbf_s.

    A random draw (mtbf_s) has no end of its own but max_faults: its faults are drawn as they are
    taken (ChaosInjector takes them as its run's clock reaches them), so a run draws only as far as
    it lasts. A schedule's events are checked here, at once."""
    if not cfg.enabled:
        return iter(())
    for ev in cfg.schedule:
        if ev.group is not None and ev.group >= n_groups:
            raise ChaosSpecError(
                f"chaos event at {ev.at_s:g} s targets group {ev.group}, but the job has {n_groups} groups"
            )
    if cfg.schedule:
        out = sorted((PlannedFault(e.at_s, e.kind, e.group, e.mode) for e in cfg.schedule), key=lambda f: f.at_s)
        return iter(out if cfg.max_faults is None else out[: cfg.max_faults])
    if cfg.mtbf_s is not None:
        return _draws(cfg.mtbf_s, cfg.seed, list(cfg.kinds), cfg.start_after_s, cfg.max_faults)
    return iter(())


def is_random(cfg: ChaosConfig) -> bool:
    """Faults drawn at random (mtbf_s), not an explicit schedule."""
    return cfg.enabled and not cfg.schedule and cfg.mtbf_s is not None


def chaos_plan_text(cfg: ChaosConfig, n_groups: int) -> str:
    """What a run will inject, in a few words (a random plan has no count before the run ends)."""
    if not cfg.enabled:
        return "no chaos"
    if is_random(cfg):
        assert cfg.mtbf_s is not None
        most = "" if cfg.max_faults is None else f", at most {cfg.max_faults}"
        return f"chaos faults drawn as the run goes (mean gap {cfg.mtbf_s:g} s{most})"
    return f"{sum(1 for _ in plan(cfg, n_groups))} chaos faults scheduled"


def _draws(mtbf_s: float, seed: int, kinds: list[str], start_s: float, most: int | None) -> Iterator[PlannedFault]:
    """Exponential gaps with mean mtbf_s after start_s, kinds from the seed; the same seed, the same faults."""
    rng = random.Random(seed)
    t = start_s
    for _ in itertools.count() if most is None else range(most):
        t += rng.expovariate(1.0 / mtbf_s)
        yield PlannedFault(round(t, 3), rng.choice(kinds), None)


def pick_group(healthy: list[int], fault_index: int, seed: int) -> int:
    """The group a fault without a target hits: one of the healthy groups, reproducibly from the seed."""
    return random.Random(seed * 1_000_003 + fault_index).choice(sorted(healthy))
