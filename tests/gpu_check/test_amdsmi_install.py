"""A missing or mismatched amdsmi is reported by the GPU check: what was found, what is expected, how to fix.

Through the real probe worker and the real amdsmi package, with the simulated library standing in for ROCm's."""

from __future__ import annotations

import os
from pathlib import Path

from lamplighter.configs.schema import HealthConfig
from lamplighter.gpusim.build import sim_env
from lamplighter.gpusim.state import StateDir
from lamplighter.supervisor.gpu.amdsmi_install import AmdsmiFacts, import_failure, mismatch, rocm_release
from lamplighter.supervisor.gpu.check_once import check_once
from lamplighter.supervisor.gpu.worker import WorkerSpec

CFG = HealthConfig()


def facts(pkg: str | None, rocm: str | None) -> AmdsmiFacts:
    return AmdsmiFacts("/venv/bin/python", "amdsmi", pkg, "/opt/rocm", rocm)


def test_versions_compare_only_when_they_are_comparable() -> None:
    assert rocm_release("7.0.2-56\n") == "7.0.2" and rocm_release("x") is None
    assert mismatch(facts("7.0.2", "7.0.1")) is None  # same release line
    assert mismatch(facts("26.0.2", "7.0.2")) is None  # ROCm's own copy carries the library version
    assert mismatch(facts("7.0.2", None)) is None and mismatch(facts(None, "7.0.2")) is None
    msg = mismatch(facts("7.0.2", "6.4.3"))
    assert msg is not None and "found: amdsmi 7.0.2" in msg and "expected: the amdsmi package of ROCm 6.4.3" in msg
    assert "/venv/bin/python -m pip install /opt/rocm/share/amd_smi" in msg


def test_import_failures_name_the_cause() -> None:
    assert "no `amdsmi` package" in import_failure(facts(None, "7.0.2"), ModuleNotFoundError("amdsmi"))
    lib = import_failure(facts("7.0.2", "7.0.2"), KeyError("libamd_smi.so"), "Unable to find libamd_smi.so library")
    assert "could not load libamd_smi.so (Unable to find libamd_smi.so library)" in lib
    sym = import_failure(facts("7.0.2", "6.4.0"), AttributeError("undefined symbol: amdsmi_get_cpu_affinity"))
    assert "different ROCm releases" in sym and "ROCm 6.4.0" in sym


def test_check_reports_a_missing_library(tmp_path: Path) -> None:
    env = dict(os.environ, ROCM_PATH=str(tmp_path / "no-rocm"), LD_LIBRARY_PATH="")
    env.pop("ROCM_HOME", None)
    res = check_once(CFG, WorkerSpec(env=env), deadline_s=20)
    assert res.verdict == "unknown", res
    o = res.observations[0]
    assert o.kind == "amdsmi-install" and "could not load libamd_smi.so" in o.reason and "fix:" in o.reason


def test_check_reports_a_missing_package(tmp_path: Path, gpusim_root: Path, state: StateDir) -> None:
    res = check_once(CFG, WorkerSpec(env=sim_env(gpusim_root, state.root), module="amdsmi_absent"), deadline_s=20)
    assert res.verdict == "unknown" and "no `amdsmi_absent` package" in res.summary()


def test_check_refuses_a_package_of_another_rocm_release(tmp_path: Path, gpusim_root: Path, state: StateDir) -> None:
    rocm = tmp_path / "rocm-6.4.3"
    (rocm / ".info").mkdir(parents=True)
    (rocm / ".info" / "version").write_text("6.4.3-120\n")
    (rocm / "lib").symlink_to(gpusim_root / "lib")
    res = check_once(CFG, WorkerSpec(env=sim_env(rocm, state.root)), deadline_s=20)
    assert res.verdict == "unknown"
    reason = res.observations[0].reason
    assert "amdsmi mismatched: found: amdsmi 7.0.2" in reason and "ROCm 6.4.3" in reason
    assert str(rocm / "lib" / "libamd_smi.so") in reason  # the library it loaded


def test_matching_simulation_is_healthy(gpusim_root: Path, state: StateDir) -> None:
    res = check_once(CFG, WorkerSpec(env=sim_env(gpusim_root, state.root)), deadline_s=20)
    assert res.verdict == "healthy" and len(res.observations) == 8
