"""Worker side: read one GPU through an amdsmi module into a plain dict.

The module is passed in (the real `amdsmi` in the worker process, a fake in
unit tests); nothing here imports amdsmi. A reading that fails is recorded
with its status name, never dropped: the assessment must know what it could
not see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NOT_SUPPORTED = 2  # AMDSMI_STATUS_NOT_SUPPORTED
NO_DATA = 40  # AMDSMI_STATUS_NO_DATA: no event pending
EVENT_TYPES = ("GPU_PRE_RESET", "GPU_POST_RESET", "VMFAULT", "THERMAL_THROTTLE")
TEMP_SENSORS = {"edge": "EDGE", "hotspot": "HOTSPOT", "vram": "VRAM"}


def status_name(exc: BaseException) -> str:
    """'AMDSMI_STATUS_X' for a library exception, else the exception's type and text."""
    info = getattr(exc, "get_error_info", None)
    if callable(info):
        try:
            return str(info(False))
        except Exception:
            pass
    return f"{type(exc).__name__}: {exc}"


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "err_code", None)
    return code if isinstance(code, int) else None


class Reading:
    """Collects values, unsupported readings and errors of one probe."""

    def __init__(self, amdsmi: Any) -> None:
        self.amdsmi = amdsmi
        self.values: dict[str, Any] = {}
        self.unsupported: list[str] = []
        self.errors: dict[str, str] = {}

    def take(self, name: str, read: Callable[[], Any]) -> None:
        try:
            self.values[name] = read()
        except self.amdsmi.AmdSmiLibraryException as exc:
            if _code(exc) == NOT_SUPPORTED:
                self.unsupported.append(name)
            else:
                self.errors[name] = status_name(exc)
        except self.amdsmi.AmdSmiException as exc:
            self.errors[name] = status_name(exc)

    def as_dict(self) -> dict[str, Any]:
        return {"values": self.values, "unsupported": self.unsupported, "errors": self.errors}


def find_gpu(amdsmi: Any, index: int, bdf: str | None) -> tuple[Any, str, int]:
    """The handle of the GPU with this BDF (after a restart) or at this index; with its BDF and the GPU count.

    Raises LookupError when it is not enumerated (a lost GPU leaves the list).
    """
    handles = amdsmi.amdsmi_get_processor_handles()
    bdfs = [amdsmi.amdsmi_get_gpu_device_bdf(h) for h in handles]
    if bdf is not None:
        if bdf not in bdfs:
            raise LookupError(f"GPU {bdf} is no longer enumerated ({len(handles)} GPUs present: {', '.join(bdfs)})")
        i = bdfs.index(bdf)
        return handles[i], bdf, len(handles)
    if not 0 <= index < len(handles):
        raise LookupError(f"GPU index {index} is not enumerated ({len(handles)} GPUs present)")
    return handles[index], bdfs[index], len(handles)


def open_events(amdsmi: Any, handle: Any) -> Any:
    """Subscribe to the RAS-relevant events of one GPU; None if the GPU cannot deliver them."""
    types = [getattr(amdsmi.AmdSmiEvtNotificationType, name) for name in EVENT_TYPES]
    try:
        return amdsmi.AmdSmiEventReader(handle, types)
    except amdsmi.AmdSmiException:
        return None


def read_events(amdsmi: Any, reader: Any, max_reads: int = 4) -> list[dict[str, str]]:
    """Drain pending events without waiting (timeout 0); NO_DATA means none."""
    events: list[dict[str, str]] = []
    for _ in range(max_reads):
        try:
            batch = reader.read(0)
        except amdsmi.AmdSmiLibraryException as exc:
            if _code(exc) == NO_DATA:
                break
            raise
        events += [{"event": str(e["event"]), "message": str(e["message"])} for e in batch]
        if len(batch) < 10:
            break
    return events


def probe_gpu(amdsmi: Any, handle: Any, events_reader: Any = None) -> dict[str, Any]:
    """Everything the health assessment needs from one GPU, as a JSON-able dict."""
    r = Reading(amdsmi)
    r.take("ecc", lambda: dict(amdsmi.amdsmi_get_gpu_total_ecc_count(handle)))
    temp_type, metric = amdsmi.AmdSmiTemperatureType, amdsmi.AmdSmiTemperatureMetric

    def temperature(sensor: str) -> Callable[[], int]:
        return lambda: int(amdsmi.amdsmi_get_temp_metric(handle, getattr(temp_type, sensor), metric.CURRENT))

    for key, sensor in TEMP_SENSORS.items():
        r.take(f"temp_{key}", temperature(sensor))
    r.take("activity", lambda: dict(amdsmi.amdsmi_get_gpu_activity(handle)))
    r.take("power", lambda: dict(amdsmi.amdsmi_get_power_info(handle)))
    r.take("vram", lambda: dict(amdsmi.amdsmi_get_gpu_vram_usage(handle)))
    r.take("bad_pages", lambda: len(amdsmi.amdsmi_get_gpu_bad_page_info(handle)))
    r.take("xgmi_status", lambda: int(amdsmi.amdsmi_gpu_xgmi_error_status(handle)))
    out = r.as_dict()
    events: list[dict[str, str]] = []
    if events_reader is not None:
        try:
            events = read_events(amdsmi, events_reader)
        except amdsmi.AmdSmiException as exc:
            out["errors"]["events"] = status_name(exc)
    out["events"] = events
    return out
