"""The real healthcheck command against the real amdsmi package and simulated GPUs: a node that boots with
fewer GPUs than its node.yaml names is faulty, the count in the reason (2 found, 3 expected); a wedged GPU
leaves the check bounded by --deadline, each GPU without a verdict unresponsive and its worker killed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from lamplighter.gpusim.inject import inject
from lamplighter.gpusim.state import StateDir

pytestmark = pytest.mark.integration


def faulty_check(tmp_path: Path, gpu_count: int, deadline: int) -> dict[str, Any]:
    """`lamplighter healthcheck --json` on n1's simulated GPUs under tmp_path/gpus, drained nothing; it must
    find n1 faulty (exit 1): its JSON."""
    node = tmp_path / "node.yaml"
    node.write_text(f"gpu_count: {gpu_count}\n")
    r = subprocess.run(
        [sys.executable, "-m", "lamplighter", "healthcheck", "--config", str(node), "--node", "n1"]
        + ["--gpusim-root", str(tmp_path / "gpus"), "--no-drain", "--json", "--deadline", str(deadline)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert r.returncode == 1, r.stdout + r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def test_healthcheck_finds_fewer_gpus_than_the_node_config_names(tmp_path: Path, gpusim_root: Path) -> None:
    StateDir(tmp_path / "gpus" / "n1").init(2)
    out = faulty_check(tmp_path, gpu_count=3, deadline=30)
    assert out["verdict"] == "faulty" and out["drain"] == "not asked (--no-drain)"
    assert out["summary"].startswith("2 of 3 GPUs found (gpu_count 3 in the node config); GPU 2"), out["summary"]


def test_a_wedged_gpu_ends_the_check_at_its_deadline_with_every_gpu_without_a_verdict_unresponsive(
    tmp_path: Path, gpusim_root: Path
) -> None:
    sd = StateDir(tmp_path / "gpus" / "n1")
    sd.init(2)
    inject(sd, 1, "hang")  # every call on GPU 1 blocks for good: without the deadline the check never ends
    out = faulty_check(tmp_path, gpu_count=2, deadline=3)
    assert out["verdict"] == "faulty" and len(out["gpus"]) == 2
    assert out["gpus"][1]["status"] == "unresponsive" and "within 3 s" in out["gpus"][1]["reason"], out["gpus"]
    # (A wedged GPU blocks amdsmi_init here as on a real node, so GPU 0's worker may get no verdict either.)
    for g in out["gpus"]:
        assert g["status"] in ("ok", "unresponsive"), g
        if g["status"] == "unresponsive":
            pid = int(re.search(r"worker pid (\d+) killed", g["reason"]).group(1))  # type: ignore[union-attr]
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, g
