"""Fault kinds the simulation can be given, and what each does to a GPU's state.

Each injection edits the GPU's state file under the folder lock (so
concurrent injectors do not lose counts) and, for kinds the kernel reports as
kfd SMI events, queues the event a real driver would send.
"""

from __future__ import annotations

from typing import Literal, get_args

from lamplighter.gpusim.state import BLOCKS, MODELS, GpusimError, GpuState, StateDir, default_gpu

FaultKind = Literal[
    "ecc-uncorrectable",
    "ecc-correctable",
    "ecc-deferred",
    "thermal",
    "ras-reset",
    "vmfault",
    "bad-pages",
    "xgmi",
    "hang",
    "lost",
]
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)

# amdsmi_evt_notification_type_t
EVT_VMFAULT = 1
EVT_THERMAL_THROTTLE = 2
EVT_GPU_PRE_RESET = 3
EVT_GPU_POST_RESET = 4

DEFAULT_THERMAL_C = 120
# SMU throttler bit for a junction (hotspot) temperature limit, as reported in the kfd message.
THROTTLE_BITMASK_THERMAL = 0x8

FAULT_HELP = {
    "ecc-uncorrectable": "add K uncorrectable ECC errors to --block (default umc, i.e. HBM)",
    "ecc-correctable": "add K correctable ECC errors to --block",
    "ecc-deferred": "add K deferred (poisoned, not yet consumed) ECC errors to --block",
    "thermal": "set every sensor the GPU has to V degrees C (default 120) and send THERMAL_THROTTLE",
    "ras-reset": "the driver resets the GPU after a RAS error: send GPU_PRE_RESET then GPU_POST_RESET",
    "vmfault": "a GPU page fault in process V (pid, default 0): send VMFAULT",
    "bad-pages": "retire K more memory pages",
    "xgmi": "XGMI link error (K=1: ERROR, K>1: MULTIPLE_ERRORS)",
    "hang": "every later call on the GPU blocks (wedged driver) until `gpusim clear`",
    "lost": "the GPU falls off the bus: calls fail, a new amdsmi_init no longer lists it",
}


def inject(sd: StateDir, gpu: int, fault: str, count: int = 1, value: float | None = None, block: str = "umc") -> str:
    """Apply one fault to GPU `gpu`; return a one-line description of what changed."""
    if fault not in FAULT_KINDS:
        raise GpusimError(f"unknown fault {fault!r}; choose one of {', '.join(FAULT_KINDS)}")
    if count < 1:
        raise GpusimError(f"--count must be at least 1, got {count}")
    if block not in BLOCKS:
        raise GpusimError(f"unknown ECC block {block!r}; choose one of {', '.join(BLOCKS)}")
    sd.check_gpu(gpu)
    events: list[tuple[int, str]] = []

    def change(st: GpuState) -> None:
        if fault.startswith("ecc-"):
            if block not in st.ecc_blocks:
                raise GpusimError(f"GPU {gpu} has no RAS on block {block} (enabled: {', '.join(st.ecc_blocks)})")
            counts = {"ecc-uncorrectable": st.ecc_ue, "ecc-correctable": st.ecc_ce, "ecc-deferred": st.ecc_de}[fault]
            counts[block] = counts.get(block, 0) + count
        elif fault == "thermal":
            temp = int(DEFAULT_THERMAL_C if value is None else value)
            for sensor, current in st.temp.items():
                if current is not None:
                    st.temp[sensor] = temp
            st.throttle_count += 1
            events.append((EVT_THERMAL_THROTTLE, f"{THROTTLE_BITMASK_THERMAL:x}:{st.throttle_count:x}"))
        elif fault == "ras-reset":
            st.reset_seq += 1
            events.append((EVT_GPU_PRE_RESET, f"{st.reset_seq:x}"))
            events.append((EVT_GPU_POST_RESET, f"{st.reset_seq:x}"))
        elif fault == "vmfault":
            pid = int(value or 0)
            name = next((n for p, _, n in st.procs if p == pid), "unknown")
            events.append((EVT_VMFAULT, f"{pid:x}:{name}"))  # kernel format "%x:%s" (pid:task)
        elif fault == "bad-pages":
            st.bad_pages += count
        elif fault == "xgmi":
            st.xgmi_status = 1 if count == 1 else 2
        elif fault == "hang":
            st.hang = True
        elif fault == "lost":
            st.lost = True

    with sd.locked():
        st = sd.read(gpu)
        change(st)
        sd.write(st)
        for event, message in events:
            sd.append_event(gpu, event, message)
    return (
        f"GPU {gpu}: {fault}"
        + (f" x{count}" if count > 1 else "")
        + (f" (value {value:g})" if value is not None else "")
    )


def clear(sd: StateDir, gpu: int | None = None) -> list[int]:
    """Return GPUs to healthy: faults, counters and temperatures reset; identity and event queue kept."""
    n = sd.gpu_count()
    targets = list(range(n)) if gpu is None else [gpu]
    if gpu is not None:
        sd.check_gpu(gpu)
    model_name = next((line[6:] for line in sd.node_file().read_text().splitlines() if line.startswith("model=")), "")
    model = next((m for m in MODELS.values() if m.name == model_name), MODELS["mi300x"])
    with sd.locked():
        for i in targets:
            old = sd.read(i)
            fresh = default_gpu(i, model)
            fresh.bdf, fresh.uuid, fresh.procs = old.bdf, old.uuid, old.procs
            fresh.reset_seq, fresh.throttle_count = old.reset_seq, old.throttle_count
            fresh.temp, fresh.temp_crit = _healthy_temps(old, fresh), old.temp_crit
            sd.write(fresh)
    return targets


def _healthy_temps(old: GpuState, fresh: GpuState) -> dict[str, int | None]:
    # Keep "no sensor" where the GPU has none; otherwise the idle default.
    idle = {"edge": 38, **{k: v for k, v in fresh.temp.items() if v is not None}}
    return {s: (None if old.temp.get(s) is None else idle.get(s, 40)) for s in old.temp}
