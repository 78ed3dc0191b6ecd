"""The real amdsmi package against the simulated library: values, statuses and exceptions."""

from __future__ import annotations

import ctypes
import select
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lamplighter.gpusim.inject import inject
from lamplighter.gpusim.state import StateDir
from lamplighter.gpusim.symbols import installed_symbols

Run = Callable[[str], Any]
UNKNOWN_ERROR = 0xFFFFFFFF


def test_import_and_enumerate_eight_gpus(run_amdsmi: Run) -> None:
    out = run_amdsmi("""
        amdsmi_init()
        hs = amdsmi_get_processor_handles()
        out = {"n": len(hs), "bdf": [amdsmi_get_gpu_device_bdf(h) for h in hs],
               "uuid": amdsmi_get_gpu_device_uuid(hs[0]), "type": amdsmi_get_processor_type(hs[0]),
               "sockets": len(amdsmi_get_socket_handles())}
        amdsmi_shut_down()
    """)
    assert out["n"] == 8 and out["sockets"] == 8
    assert out["bdf"][0] == "0000:05:00.0" and len(set(out["bdf"])) == 8
    assert len(out["uuid"]) == 36
    assert out["type"] == {"processor_type": "AMDSMI_PROCESSOR_TYPE_AMD_GPU"}


def test_library_exports_every_symbol_the_installed_wrapper_binds(gpusim_root: Path) -> None:
    lib = ctypes.CDLL(str(gpusim_root / "lib" / "libamd_smi.so"))  # plain CDLL: amdsmi itself is not imported here
    missing = [name for name in installed_symbols() if not hasattr(lib, name)]
    assert installed_symbols(), "no bindings parsed from amdsmi_wrapper.py"
    assert missing == [], f"amdsmi binds symbols gpusim does not export: {missing}"


def test_struct_layouts_match_the_wrapper(run_amdsmi: Run, gpusim_root: Path) -> None:
    names = [
        "amdsmi_bdf_t",
        "amdsmi_error_count_t",
        "amdsmi_engine_usage_t",
        "amdsmi_power_info_t",
        "amdsmi_vram_usage_t",
        "amdsmi_retired_page_record_t",
        "amdsmi_proc_info_t",
        "amdsmi_evt_notification_data_t",
        "amdsmi_version_t",
    ]
    wrapper = run_amdsmi(f"""
        import ctypes
        from amdsmi import amdsmi_wrapper as w
        out = {{n: ctypes.sizeof(getattr(w, n)) for n in {names!r}}}
    """)
    lib = ctypes.CDLL(str(gpusim_root / "lib" / "libamd_smi.so"))
    lib.gpusim_struct_size.restype = ctypes.c_size_t
    ours = {n: lib.gpusim_struct_size(n.encode()) for n in names}
    assert ours == wrapper


def test_unmodelled_function_raises_not_supported(run_amdsmi: Run) -> None:
    out = run_amdsmi("""
        amdsmi_init()
        h = amdsmi_get_processor_handles()[0]
        try:
            amdsmi_get_gpu_asic_info(h)
            out = None
        except AmdSmiLibraryException as e:
            out = e.get_error_code()
    """)
    assert out == 2  # AMDSMI_STATUS_NOT_SUPPORTED


def test_healthy_readings(run_amdsmi: Run) -> None:
    out = run_amdsmi("""
        amdsmi_init()
        h = amdsmi_get_processor_handles()[0]
        T, M = AmdSmiTemperatureType, AmdSmiTemperatureMetric
        def temp(s, m):
            try:
                return amdsmi_get_temp_metric(h, s, m)
            except AmdSmiLibraryException as e:
                return e.get_error_code()
        out = {"ecc": amdsmi_get_gpu_total_ecc_count(h), "hot": temp(T.HOTSPOT, M.CURRENT),
               "hot_crit": temp(T.HOTSPOT, M.CRITICAL), "edge": temp(T.EDGE, M.CURRENT),
               "act": amdsmi_get_gpu_activity(h), "power": amdsmi_get_power_info(h),
               "vram": amdsmi_get_gpu_vram_usage(h), "bad": amdsmi_get_gpu_bad_page_info(h),
               "thr": amdsmi_get_gpu_bad_page_threshold(h), "xgmi": amdsmi_gpu_xgmi_error_status(h),
               "umc": amdsmi_get_gpu_ecc_status(h, AmdSmiGpuBlock.UMC).name,
               "enabled": amdsmi_get_gpu_ecc_enabled(h), "procs": amdsmi_get_gpu_process_list(h),
               "vram_bytes": amdsmi_get_gpu_memory_total(h, AmdSmiMemoryType.VRAM)}
    """)
    assert out["ecc"] == {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0}
    assert out["hot"] == 42 and out["hot_crit"] == 110
    assert out["edge"] == 2  # MI300X has no edge sensor: NOT_SUPPORTED
    assert out["act"]["mm_activity"] == "N/A" and out["power"]["power_limit"] == 750
    assert out["vram"]["vram_total"] == 196_592 and out["vram_bytes"] == 196_592 * 2**20
    assert out["bad"] == [] and out["xgmi"] == 0 and out["procs"] == []
    assert out["umc"] == "ENABLED" and out["enabled"] & 1


def test_each_counter_fault_reads_back(run_amdsmi: Run, state: StateDir) -> None:
    inject(state, 1, "ecc-uncorrectable", count=2)
    inject(state, 1, "ecc-correctable", count=5, block="gfx")
    inject(state, 1, "ecc-deferred")
    inject(state, 2, "thermal", value=118)
    inject(state, 3, "bad-pages", count=3)
    inject(state, 4, "xgmi", count=2)
    out = run_amdsmi("""
        amdsmi_init()
        hs = amdsmi_get_processor_handles()
        T, M = AmdSmiTemperatureType, AmdSmiTemperatureMetric
        out = {"total": amdsmi_get_gpu_total_ecc_count(hs[1]),
               "umc": amdsmi_get_gpu_ecc_count(hs[1], AmdSmiGpuBlock.UMC),
               "gfx": amdsmi_get_gpu_ecc_count(hs[1], AmdSmiGpuBlock.GFX),
               "hot": amdsmi_get_temp_metric(hs[2], T.HOTSPOT, M.CURRENT),
               "mem": amdsmi_get_temp_metric(hs[2], T.VRAM, M.CURRENT),
               "bad": amdsmi_get_gpu_bad_page_info(hs[3]), "xgmi": amdsmi_gpu_xgmi_error_status(hs[4])}
    """)
    assert out["total"] == {"correctable_count": 5, "uncorrectable_count": 2, "deferred_count": 1}
    assert out["umc"] == {"correctable_count": 0, "uncorrectable_count": 2, "deferred_count": 1}
    assert out["gfx"]["correctable_count"] == 5
    assert out["hot"] == 118 and out["mem"] == 118
    assert [p["page_size"] for p in out["bad"]] == [4096] * 3 and out["bad"][0]["status"] == 0
    assert out["xgmi"] == 2  # MULTIPLE_ERRORS


def test_events_are_delivered_with_messages(run_amdsmi: Run, state: StateDir) -> None:
    # The reader subscribes first (it sees only later events), then the faults happen.
    out = run_amdsmi(f"""
        import subprocess, sys
        amdsmi_init()
        h = amdsmi_get_processor_handles()[6]
        E = AmdSmiEvtNotificationType
        reader = AmdSmiEventReader(h, [E.GPU_PRE_RESET, E.GPU_POST_RESET, E.VMFAULT, E.THERMAL_THROTTLE])
        try:
            reader.read(0)
            empty = None
        except AmdSmiLibraryException as e:
            empty = e.get_error_code()
        from lamplighter.gpusim.inject import inject
        from lamplighter.gpusim.state import StateDir
        from pathlib import Path
        sd = StateDir(Path({str(state.root)!r}))
        inject(sd, 6, "ras-reset"); inject(sd, 6, "vmfault", value=4660); inject(sd, 6, "thermal")
        events = reader.read(1000, 10)
        reader.stop()
        out = {{"empty": empty, "events": [(e["event"], e["message"]) for e in events],
               "same_gpu": all(e["processor_handle"].value == h.value for e in events)}}
    """)
    assert out["empty"] == 40  # AMDSMI_STATUS_NO_DATA
    assert out["events"] == [
        ["GPU_PRE_RESET", "1"],
        ["GPU_POST_RESET", "1"],
        ["VMFAULT", "1234:unknown"],
        ["THERMAL_THROTTLE", "8:1"],
    ]
    assert out["same_gpu"]


def test_lost_gpu_fails_and_leaves_enumeration(run_amdsmi: Run, state: StateDir) -> None:
    inject(state, 5, "lost")
    out = run_amdsmi("""
        amdsmi_init()
        hs = amdsmi_get_processor_handles()
        out = {"n": len(hs), "bdfs": [amdsmi_get_gpu_device_bdf(h) for h in hs]}
    """)
    assert out["n"] == 7 and "0000:a6:00.0" not in out["bdfs"]


def _child(env: dict[str, str], body: str) -> subprocess.Popen[str]:
    """A long-running amdsmi process that runs `body` for each line it reads."""
    script = (
        "import sys, amdsmi\nfrom amdsmi import *\namdsmi_init()\nhs = amdsmi_get_processor_handles()\n"
        "print('ready', flush=True)\nfor line in sys.stdin:\n"
        "    try:\n        print(" + body + ", flush=True)\n"
        "    except AmdSmiLibraryException as e:\n        print('err', e.get_error_code(), flush=True)\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _ask(p: subprocess.Popen[str]) -> None:
    assert p.stdin is not None
    p.stdin.write("go\n")
    p.stdin.flush()


def _line(p: subprocess.Popen[str], wait_s: float) -> str | None:
    assert p.stdout is not None
    ready, _, _ = select.select([p.stdout], [], [], wait_s)
    return p.stdout.readline().strip() if ready else None


def test_injection_is_seen_by_a_running_process(sim_env_for: dict[str, str], state: StateDir) -> None:
    p = _child(sim_env_for, "amdsmi_get_gpu_total_ecc_count(hs[0])['uncorrectable_count']")
    try:
        assert _line(p, 30) == "ready"
        _ask(p)
        assert _line(p, 30) == "0"
        inject(state, 0, "ecc-uncorrectable", count=3)
        _ask(p)
        assert _line(p, 30) == "3"
        inject(state, 0, "lost")
        _ask(p)
        assert _line(p, 30) == f"err {UNKNOWN_ERROR}"
    finally:
        p.kill()
        p.wait()


def test_hang_blocks_until_cleared(sim_env_for: dict[str, str], state: StateDir) -> None:
    from lamplighter.gpusim.inject import clear

    p = _child(
        sim_env_for, "amdsmi_get_temp_metric(hs[2], AmdSmiTemperatureType.HOTSPOT, AmdSmiTemperatureMetric.CURRENT)"
    )
    try:
        assert _line(p, 30) == "ready"
        inject(state, 2, "hang")
        _ask(p)
        assert _line(p, 0.5) is None  # blocked inside the call (proves nothing about latency)
        clear(state, 2)
        assert _line(p, 30) == "42"
    finally:
        p.kill()
        p.wait()
