"""`lamplighter nodes release` on the real Slurm test cluster: before lamplighter is removed (deploy/README.md,
"Uninstalling"), every node it took out goes back to Slurm, and none that someone else took out."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lamplighter.lab.testcluster import TestCluster
from lamplighter.slurm.actions import SlurmActions

pytestmark = pytest.mark.integration


def release(cluster: TestCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lamplighter", "nodes", "release", *args],
        env=dict(os.environ, SLURM_CONF=str(cluster.conf_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_release_lists_then_resumes_only_what_lamplighter_took_out(clean_slurm_cluster: TestCluster) -> None:
    api = SlurmActions(clean_slurm_cluster.cli())
    api.drain("n1", "lamplighter: GPU 0 (0000:05:00.0) uncorrectable ECC +1 (max 0)")
    api.drain("n2", "maintenance: new PSU")
    api.drain("n3", "lamplighter: healthcheck: GPU 1 unresponsive")

    dry = release(clean_slurm_cluster)
    assert dry.returncode == 0, dry.stderr
    assert "would resume 2 node(s)" in dry.stdout and "n1" in dry.stdout and "n3" in dry.stdout
    assert "n2" not in dry.stdout and "add --yes" in dry.stdout
    assert all(api.node(n).is_drained for n in ("n1", "n2", "n3"))  # a dry run changes nothing

    done = release(clean_slurm_cluster, "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("-> resumed") == 2
    assert not api.node("n1").is_drained and not api.node("n3").is_drained
    assert api.node("n2").is_drained and api.node("n2").reason == "maintenance: new PSU"

    again = release(clean_slurm_cluster, "--yes")
    assert again.returncode == 0 and "nothing to release" in again.stdout
