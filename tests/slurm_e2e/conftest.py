"""Fixtures the Slurm end-to-end tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from realparts import require_netns, require_slurm

from lamplighter.configs.schema import HealthConfig
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab, running_lab
from lamplighter.lab.testcluster import TestCluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TestCluster]:
    """A fresh 3-node test cluster of the test's own (lifecycle and submit tests change its jobs and nodes), each
    node a machine of its own (network, host name, address)."""
    require_slurm()
    require_netns()
    c = TestCluster(tmp_path / "cluster", nodes=3, netns=True)
    c.up()
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SlurmLab]:
    """The lab with daemons (a test file with other needs defines its own `lab`): 3 compute nodes of one GPU each beside the head, each a machine of its own."""
    require_slurm()
    require_netns()
    settings = LabSettings(compute_nodes=3, gpus_per_node=1, health=HealthConfig(poll_interval_s=0.5))
    with running_lab(tmp_path / "lab", settings) as lab:
        yield lab
