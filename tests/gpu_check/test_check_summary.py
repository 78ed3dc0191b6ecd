"""The check's one-line summary (the healthcheck's output and its drain reason): GPUs with the same problem are
said once, each GPU with a problem of its own on its own."""

from __future__ import annotations

from lamplighter.supervisor.gpu.check_once import OnceResult, gpu_ranges
from lamplighter.supervisor.gpu.observation import GpuObservation

NO_AMDSMI = "health unknown: amdsmi unusable: found: amdsmi 7.0.2, which could not load libamd_smi.so (...); fix: ..."


def test_gpus_with_the_same_problem_are_said_once_and_others_on_their_own() -> None:
    obs = [GpuObservation(g, "unknown", "amdsmi-install", f"GPU {g} {NO_AMDSMI}") for g in range(8)]
    assert OnceResult("unknown", obs, 1.0).summary() == f"GPUs 0-7 {NO_AMDSMI}"
    mixed = [
        GpuObservation(0, "ok", "healthy", "GPU 0 healthy"),
        GpuObservation(1, "fault", "ecc", "GPU 1 (0000:26:00.0) uncorrectable ECC +2 (max 0)"),
        GpuObservation(2, "unresponsive", "init-timeout", "GPU 2 unresponsive: amdsmi_init did not return within 3 s"),
        GpuObservation(3, "unresponsive", "init-timeout", "GPU 3 unresponsive: amdsmi_init did not return within 3 s"),
        GpuObservation(5, "unresponsive", "init-timeout", "GPU 5 unresponsive: amdsmi_init did not return within 3 s"),
        GpuObservation(9, "fault", "lost", "a reason that does not start with its GPU"),
    ]
    assert OnceResult("faulty", mixed, 1.0).summary() == (
        "GPU 1 (0000:26:00.0) uncorrectable ECC +2 (max 0); "
        "GPUs 2-3, 5 unresponsive: amdsmi_init did not return within 3 s; "
        "a reason that does not start with its GPU"
    )
    assert OnceResult("healthy", mixed[:1], 1.0).summary() == "1 GPU(s) healthy"


def test_gpu_ranges() -> None:
    assert gpu_ranges([0]) == "0" and gpu_ranges([0, 1, 2, 3, 5]) == "0-3, 5" and gpu_ranges([1, 3, 4]) == "1, 3-4"
