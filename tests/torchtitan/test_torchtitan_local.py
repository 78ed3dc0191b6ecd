"""The real torchtitan under `lamplighter local`: a short per-step job through a kill, in CI.

Per-step fault tolerance is where torchtitan 0.3.0 breaks without lamplighter's launch: the replica that sends
the heal dies (torchft#347), and the healed replica's weights never match again (torchtitan#4598). So the
test asserts what those would break: every group reaches the target, nothing is lost, and the healed group's
state hash equals its peer's on steps after the heal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lamplighter.lab.demo_torchtitan import job_config
from lamplighter.lab.torchtitan_env import TitanEnv

pytestmark = [pytest.mark.integration, pytest.mark.heavy(seconds=120)]

# The survivor trains on alone after the kill: enough steps that it is still training when the killed group
# is back (a cold restart and heal takes 20-45 s here), so the heal has a live peer and is checked.
STEPS = 80


def test_a_per_step_job_heals_from_a_kill_with_identical_weights(titan_env: TitanEnv, tmp_path: Path) -> None:
    job = job_config(
        "per-step", titan_env, tmp_path / "run", steps=STEPS, faults=[{"at_s": 3, "kind": "kill", "group": 1}]
    )
    job["groups"]["count"] = 2
    job["lighthouse"]["min_replicas"] = 1  # two groups: the survivor trains on alone while the other is down
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    done = subprocess.run(
        [sys.executable, "-m", "lamplighter", "local", str(tmp_path / "job.yaml"), "--report", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    assert (tmp_path / "report.json").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    said = done.stdout[-2500:]
    assert done.returncode == 0, said
    assert report["reached_target"] and report["trainer_steps"] == STEPS, said
    assert report["steps_lost"] == 0 and report["weights_identical"] is True, said
    [kill] = [f for f in report["faults"] if f["kind"] == "kill"]
    assert kill["t_first_commit_after"] is not None and kill["steps_compared_after"] >= 1, kill
    log = (tmp_path / "run" / "logs" / "group0.log").read_text()
    assert "lamplighter: applying fix for torchft#347 on torchtitan 0.3.0" in log
