"""Fixtures the Slurm end-to-end tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from realparts import require_netns, require_slurm

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
