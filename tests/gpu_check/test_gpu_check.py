"""The GPU check against the real amdsmi package and the simulated GPUs, through its worker processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lamplighter.configs.schema import HealthConfig
from lamplighter.gpusim.build import sim_env
from lamplighter.gpusim.inject import clear, inject
from lamplighter.gpusim.state import StateDir
from lamplighter.supervisor.gpu.assess import Baseline, assess
from lamplighter.supervisor.gpu.check import GpuCheck
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.gpu.probe import probe_gpu
from lamplighter.supervisor.gpu.worker import WorkerSpec

CFG = HealthConfig(ecc_correctable_max=0, probe_deadline_s=2.0, poll_interval_s=1.0)


class Clock:
    """The caller's time for deadlines: advanced by the test, one poll interval per cycle."""

    def __init__(self) -> None:
        self.now = 0.0

    def tick(self) -> float:
        self.now += CFG.poll_interval_s
        return self.now


@pytest.fixture(scope="module")
def sim(gpusim_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GpuCheck, StateDir, Clock]]:
    sd = StateDir(tmp_path_factory.mktemp("gpus"))
    sd.init(8)
    # collect_s is generous so a loaded machine still answers within the cycle; healthy cycles end early.
    check = GpuCheck(CFG, WorkerSpec(env=sim_env(gpusim_root, sd.root)), collect_s=3.0)
    clock = Clock()
    # Workers start (import amdsmi, amdsmi_init) and take their baselines: on a machine busy with the tests
    # that run beside this one that can take several cycles.
    for _ in range(20):
        if all(o.status == "ok" for o in check.observe(clock.tick())):
            break
    yield check, sd, clock
    check.close()


def _cycle(sim: tuple[GpuCheck, StateDir, Clock]) -> list[GpuObservation]:
    check, _, clock = sim
    return check.observe(clock.tick())


@pytest.mark.parametrize(
    ("fault", "count", "kind", "words"),
    [
        ("ecc-uncorrectable", 2, "ecc-uncorrectable", "uncorrectable ECC +2"),
        ("ecc-deferred", 1, "ecc-deferred", "deferred ECC +1"),
        ("ecc-correctable", 3, "ecc-correctable", "correctable ECC +3"),
        ("thermal", 1, "thermal", "hotspot temperature 120 C > 110 C"),
        ("ras-reset", 1, "gpu-reset", "reset by the driver"),
        ("vmfault", 1, "vmfault", "VM fault"),
        ("bad-pages", 9, "bad-pages", "9 new retired pages"),
        ("xgmi", 1, "xgmi", "XGMI link error"),
        ("lost", 1, "lost", "lost"),
    ],
)
def test_fault_is_reported_by_the_next_cycle(
    sim: tuple[GpuCheck, StateDir, Clock], fault: str, count: int, kind: str, words: str
) -> None:
    _, sd, _ = sim
    clear(sd)
    assert [o.status for o in _cycle(sim)] == ["ok"] * 8
    inject(sd, 3, fault, count=count)
    obs = _cycle(sim)
    assert obs[3].status == "fault" and obs[3].kind == kind, obs[3]
    assert obs[3].reason.startswith("GPU 3 (0000:65:00.0)") and words in obs[3].reason
    assert [o.status for i, o in enumerate(obs) if i != 3] == ["ok"] * 7
    clear(sd)


def test_hang_is_unresponsive_within_the_deadline_and_others_keep_reporting(
    sim: tuple[GpuCheck, StateDir, Clock],
) -> None:
    _, sd, _ = sim
    clear(sd)
    assert [o.status for o in _cycle(sim)] == ["ok"] * 8
    inject(sd, 5, "hang")
    seen: list[GpuObservation] = []
    for _ in range(int(CFG.probe_deadline_s / CFG.poll_interval_s) + 2):
        obs = _cycle(sim)
        assert all(o.status == "ok" for i, o in enumerate(obs) if i != 5)
        seen.append(obs[5])
        if obs[5].status == "unresponsive":
            break
    assert seen[-1].status == "unresponsive" and seen[-1].kind == "probe-timeout", seen
    assert "did not return within 2 s" in seen[-1].reason
    assert all(o.status != "ok" for o in seen)  # never healthy while wedged
    clear(sd)
    statuses: list[str] = []
    for _ in range(5):  # a fresh worker starts and the GPU is healthy again
        statuses = [o.status for o in _cycle(sim)]
        if statuses == ["ok"] * 8:
            break
    assert statuses == ["ok"] * 8


def test_baseline_ignores_errors_from_before_the_check_started() -> None:
    reading: dict[str, Any] = {
        "values": {
            "ecc": {"correctable_count": 0, "uncorrectable_count": 4, "deferred_count": 0},
            "bad_pages": 2,
            "xgmi_status": 0,
            "temp_hotspot": 50,
            "temp_vram": 40,
        },
        "unsupported": ["temp_edge"],
        "errors": {},
        "events": [],
    }
    first, base = assess(0, "0000:05:00.0", reading, Baseline(), CFG)
    assert first.status == "ok" and base.ue == 4
    reading["values"]["ecc"]["uncorrectable_count"] = 5
    second, _ = assess(0, "0000:05:00.0", reading, base, CFG)
    assert second.status == "fault" and "uncorrectable ECC +1" in second.reason


def test_failed_health_reading_is_unknown_not_ok() -> None:
    reading = {"values": {"temp_hotspot": 50}, "unsupported": [], "errors": {"ecc": "AMDSMI_STATUS_BUSY"}, "events": []}
    obs, _ = assess(1, None, reading, Baseline(), CFG)
    assert obs.status == "unknown" and "ecc: AMDSMI_STATUS_BUSY" in obs.reason


class _FakeAmdsmi:
    """The slice of the amdsmi module probe_gpu uses, with the package's shapes (checked against the real one above)."""

    class AmdSmiException(Exception):
        pass

    class AmdSmiLibraryException(AmdSmiException):
        def __init__(self, code: int) -> None:
            self.err_code = code

        def get_error_info(self, detailed: bool = True) -> str:
            return {2: "AMDSMI_STATUS_NOT_SUPPORTED"}.get(self.err_code, "AMDSMI_STATUS_UNKNOWN_ERROR")

    class AmdSmiTemperatureType:
        EDGE, HOTSPOT, VRAM = 0, 1, 2

    class AmdSmiTemperatureMetric:
        CURRENT = 0

    def amdsmi_get_gpu_total_ecc_count(self, h: object) -> dict[str, int]:
        return {"correctable_count": 1, "uncorrectable_count": 0, "deferred_count": 0}

    def amdsmi_get_temp_metric(self, h: object, sensor: int, metric: int) -> int:
        if sensor == 0:
            raise self.AmdSmiLibraryException(2)
        return 60

    def amdsmi_get_gpu_activity(self, h: object) -> dict[str, Any]:
        return {"gfx_activity": 99, "umc_activity": 10, "mm_activity": "N/A"}

    def amdsmi_get_power_info(self, h: object) -> dict[str, Any]:
        raise self.AmdSmiLibraryException(0xFFFFFFFF)

    def amdsmi_get_gpu_vram_usage(self, h: object) -> dict[str, int]:
        return {"vram_total": 196_592, "vram_used": 1000}

    def amdsmi_get_gpu_bad_page_info(self, h: object) -> list[dict[str, int]]:
        return []

    def amdsmi_gpu_xgmi_error_status(self, h: object) -> int:
        return 0


def test_probe_records_values_unsupported_and_errors_with_a_fake_module() -> None:
    out = probe_gpu(_FakeAmdsmi(), object())
    assert out["values"]["temp_hotspot"] == 60 and out["values"]["ecc"]["correctable_count"] == 1
    assert out["unsupported"] == ["temp_edge"]
    assert out["errors"] == {"power": "AMDSMI_STATUS_UNKNOWN_ERROR"}
    obs, _ = assess(0, None, out, Baseline(), CFG)
    assert obs.status == "ok"  # power is informational; the health readings all ran
