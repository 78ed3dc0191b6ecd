"""A node that boots with fewer GPUs than its node.yaml names is faulty, the count in the reason: the real
healthcheck command against the real amdsmi package and simulated GPUs (2 found, 3 expected)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lamplighter.gpusim.state import StateDir

pytestmark = pytest.mark.integration


def test_healthcheck_finds_fewer_gpus_than_the_node_config_names(tmp_path: Path, gpusim_root: Path) -> None:
    StateDir(tmp_path / "gpus" / "n1").init(2)
    node = tmp_path / "node.yaml"
    node.write_text("gpu_count: 3\n")
    r = subprocess.run(
        [sys.executable, "-m", "lamplighter", "healthcheck", "--config", str(node), "--node", "n1"]
        + ["--gpusim-root", str(tmp_path / "gpus"), "--no-drain", "--json", "--deadline", "30"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert r.returncode == 1, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["verdict"] == "faulty" and out["drain"] == "not asked (--no-drain)"
    assert out["summary"].startswith("2 of 3 GPUs found (gpu_count 3 in the node config); GPU 2"), out["summary"]
