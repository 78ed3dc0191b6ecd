"""Turn one GPU's probe reading into an observation: pure, given the baseline and thresholds.

Error counters are cumulative on a GPU (they survive process restarts and are
only cleared by a driver reload), so only the increase over the baseline taken
when the check started counts against the thresholds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lamplighter.configs.schema import NodeHealthConfig
from lamplighter.supervisor.gpu.observation import GpuObservation

# Worst first: the observation's `kind` is the worst problem found.
SEVERITY = (
    "lost",
    "gpu-reset",
    "ecc-uncorrectable",
    "ecc-deferred",
    "xgmi",
    "bad-pages",
    "thermal",
    "vmfault",
    "thermal-throttle",
    "ecc-correctable",
)
# Readings a health verdict depends on; if one of these fails, the GPU is not "ok".
HEALTH_READINGS = ("ecc", "temp_edge", "temp_hotspot", "temp_vram", "bad_pages", "xgmi_status")
EVENT_KINDS = {
    "GPU_PRE_RESET": "gpu-reset",
    "GPU_POST_RESET": "gpu-reset",
    "VMFAULT": "vmfault",
    "THERMAL_THROTTLE": "thermal-throttle",
}


@dataclass(frozen=True)
class Baseline:
    """Counter values when watching began (None: not readable then)."""

    ce: int | None = None
    ue: int | None = None
    de: int | None = None
    bad_pages: int | None = None


def update_baseline(base: Baseline, values: dict[str, Any]) -> Baseline:
    """Fill fields first seen now; follow a counter down if the driver cleared it."""
    ecc = values.get("ecc")
    fields: dict[str, int] = {}
    if isinstance(ecc, dict):
        for name, key in (("ce", "correctable_count"), ("ue", "uncorrectable_count"), ("de", "deferred_count")):
            cur = int(ecc.get(key, 0))
            old = getattr(base, name)
            if old is None or cur < old:
                fields[name] = cur
    if "bad_pages" in values:
        cur = int(values["bad_pages"])
        if base.bad_pages is None or cur < base.bad_pages:
            fields["bad_pages"] = cur
    return replace(base, **fields)


def _event_text(gpu: str, event: str, message: str) -> str:
    if event in ("GPU_PRE_RESET", "GPU_POST_RESET"):
        return f"{gpu} reset by the driver ({event}, reset seq 0x{message})"
    if event == "VMFAULT":
        pid, _, task = message.partition(":")
        return f"{gpu} GPU VM fault (pid 0x{pid} {task})"
    return f"{gpu} thermal throttling ({event} {message})"


def assess(
    gpu: int, bdf: str | None, reading: dict[str, Any], base: Baseline, cfg: NodeHealthConfig
) -> tuple[GpuObservation, Baseline]:
    """The observation for one probe reading, and the baseline to keep."""
    values: dict[str, Any] = dict(reading.get("values", {}))
    errors: dict[str, str] = dict(reading.get("errors", {}))
    unsupported: list[str] = list(reading.get("unsupported", []))
    events: list[dict[str, str]] = list(reading.get("events", []))
    name = f"GPU {gpu}" + (f" ({bdf})" if bdf else "")
    info: dict[str, Any] = {"bdf": bdf, **values, "unsupported": unsupported, "errors": errors, "events": events}

    if not values and errors:
        statuses = sorted(set(errors.values()))
        reason = f"{name} lost: every reading failed ({', '.join(statuses)}); off the bus or driver gone"
        return GpuObservation(gpu, "fault", "lost", reason, info), base

    base = update_baseline(base, values)
    problems: list[tuple[str, str]] = []
    ecc = values.get("ecc")
    if isinstance(ecc, dict):
        for field_name, key, kind, label, limit in (
            ("ue", "uncorrectable_count", "ecc-uncorrectable", "uncorrectable ECC", cfg.ecc_uncorrectable_max),
            ("de", "deferred_count", "ecc-deferred", "deferred ECC", cfg.ecc_deferred_max),
            ("ce", "correctable_count", "ecc-correctable", "correctable ECC", cfg.ecc_correctable_max),
        ):
            delta = int(ecc.get(key, 0)) - (getattr(base, field_name) or 0)
            info[f"{field_name}_delta"] = delta
            if delta > limit:
                problems.append((kind, f"{name} {label} +{delta} (max {limit})"))
    for sensor, max_c in (
        ("edge", cfg.temperature_edge_max_c),
        ("hotspot", cfg.temperature_hotspot_max_c),
        ("vram", cfg.temperature_vram_max_c),
    ):
        temp = values.get(f"temp_{sensor}")
        if isinstance(temp, int | float) and temp > max_c:
            problems.append(("thermal", f"{name} {sensor} temperature {temp:g} C > {max_c:g} C"))
    if "bad_pages" in values:
        delta = int(values["bad_pages"]) - (base.bad_pages or 0)
        info["bad_pages_delta"] = delta
        if delta > cfg.bad_pages_max:
            problems.append(("bad-pages", f"{name} {delta} new retired pages (max {cfg.bad_pages_max})"))
    xgmi = values.get("xgmi_status")
    if isinstance(xgmi, int) and xgmi != 0:
        what = "multiple XGMI link errors" if xgmi == 2 else "XGMI link error"
        problems.append(("xgmi", f"{name} {what} (xgmi status {xgmi})"))
    for ev in events:
        event_kind = EVENT_KINDS.get(ev.get("event", ""))
        if event_kind:
            problems.append((event_kind, _event_text(name, ev["event"], ev.get("message", ""))))

    if problems:
        problems.sort(key=lambda p: SEVERITY.index(p[0]))
        info["problems"] = [k for k, _ in problems]
        reason = "; ".join(dict.fromkeys(text for _, text in problems))
        return GpuObservation(gpu, "fault", problems[0][0], reason, info), base
    failed = {k: v for k, v in errors.items() if k in HEALTH_READINGS}
    if failed:
        detail = ", ".join(f"{k}: {v}" for k, v in sorted(failed.items()))
        return GpuObservation(
            gpu, "unknown", "probe-error", f"{name} health unknown: could not read {detail}", info
        ), base
    if all(k in unsupported for k in HEALTH_READINGS):
        return GpuObservation(
            gpu, "unknown", "probe-error", f"{name} health unknown: no health reading supported", info
        ), base
    return GpuObservation(gpu, "ok", "healthy", f"{name} healthy", info), base
