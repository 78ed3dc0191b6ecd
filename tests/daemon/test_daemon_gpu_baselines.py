"""GPU baselines survive a daemon restart: errors that grew while the daemon was down are still reported.

Real parts: the GPU check's amdsmi workers against the simulated library, and
the daemon's state directory (journal + snapshot) reopened as a new daemon would.
"""

from __future__ import annotations

from pathlib import Path

from lamplighter.configs.schema import HealthConfig
from lamplighter.gpusim.build import sim_env
from lamplighter.gpusim.inject import inject
from lamplighter.gpusim.state import StateDir
from lamplighter.supervisor import gpu_baselines
from lamplighter.supervisor.gpu.assess import Baseline
from lamplighter.supervisor.gpu.check import GpuCheck
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.gpu.worker import WorkerSpec
from lamplighter.supervisor.state_store import DaemonState

CFG = HealthConfig(probe_deadline_s=2.0, poll_interval_s=1.0)
GPUS = 2


def _check(env: dict[str, str], state: DaemonState) -> GpuCheck:
    return GpuCheck(
        CFG,
        WorkerSpec(env=env),
        expected_gpus=GPUS,
        collect_s=3.0,
        baselines=gpu_baselines.restore(state),
        on_baseline=gpu_baselines.persister(state),
    )


def _until_all_read(check: GpuCheck, t: float) -> tuple[list[GpuObservation], float]:
    """Cycle until every GPU has a reading (workers start, import amdsmi, take their baselines)."""
    obs: list[GpuObservation] = []
    for _ in range(20):
        t += CFG.poll_interval_s
        obs = check.observe(t)
        if len(obs) == GPUS and all(o.kind not in ("starting", "probe-pending", "probe-error") for o in obs):
            break
    return obs, t


def test_errors_that_grew_while_the_daemon_was_down_are_reported(gpusim_root: Path, tmp_path: Path) -> None:
    sd = StateDir(tmp_path / "gpus")
    sd.init(GPUS)
    inject(sd, 1, "ecc-uncorrectable", count=3)  # old errors: from before lamplighter watched; not a fault
    env = sim_env(gpusim_root, sd.root)
    state_dir = tmp_path / "state"

    state = DaemonState.load(state_dir)
    check = _check(env, state)
    try:
        obs, t = _until_all_read(check, 0.0)
        assert [o.status for o in obs] == ["ok"] * GPUS, obs
        bdf1 = obs[1].values["bdf"]
    finally:
        check.close()  # the daemon "crashes": its workers die with it, nothing is saved but the journal
        state.close()

    inject(sd, 1, "ecc-uncorrectable", count=2)  # while no daemon runs

    state = DaemonState.load(state_dir)
    try:
        restored = gpu_baselines.restore(state)
        assert restored[bdf1] == Baseline(ce=0, ue=3, de=0, bad_pages=restored[bdf1].bad_pages), restored
        check = _check(env, state)
        try:
            obs, _ = _until_all_read(check, t)
        finally:
            check.close()
    finally:
        state.close()
    assert obs[1].status == "fault" and obs[1].kind == "ecc-uncorrectable", obs[1]
    assert "uncorrectable ECC +2" in obs[1].reason, obs[1].reason
    assert obs[0].status == "ok", obs[0]


def test_without_persisted_baselines_the_new_errors_would_be_missed(gpusim_root: Path, tmp_path: Path) -> None:
    """The failure mode the persistence prevents: a fresh baseline swallows errors from the downtime."""
    sd = StateDir(tmp_path / "gpus")
    sd.init(GPUS)
    inject(sd, 1, "ecc-uncorrectable", count=2)
    state = DaemonState.load(tmp_path / "state")  # empty: a daemon that never ran here
    check = _check(sim_env(gpusim_root, sd.root), state)
    try:
        obs, _ = _until_all_read(check, 0.0)
    finally:
        check.close()
        state.close()
    assert [o.status for o in obs] == ["ok"] * GPUS, obs


def test_restore_keeps_only_gpu_entries_and_sanitises_values(tmp_path: Path) -> None:
    state = DaemonState.load(tmp_path)
    try:
        gpu_baselines.persister(state)(1.0, "0000:05:00.0", Baseline(ce=1, ue=2, de=None, bad_pages=4))
        state.set_baseline(2.0, "something-else", {"x": 1})
        state.set_baseline(3.0, "gpu:0000:06:00.0", {"ue": "bogus", "ce": -1, "bad_pages": 7})
    finally:
        state.close()
    state = DaemonState.load(tmp_path)
    try:
        assert gpu_baselines.restore(state) == {
            "0000:05:00.0": Baseline(ce=1, ue=2, de=None, bad_pages=4),
            "0000:06:00.0": Baseline(ce=None, ue=None, de=None, bad_pages=7),
        }
    finally:
        state.close()
