"""The real Slurm test cluster as a pytest fixture (re-exported repo-wide by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from realparts import require_netns, require_slurm

from lamplighter.lab.testcluster import TestCluster, reset_cluster, running_cluster


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    """One 3-node cluster for the session, each node a machine of its own (a network, host name and address
    each); tests that change it use `clean_slurm_cluster`."""
    require_slurm()
    require_netns()
    with running_cluster(tmp_path_factory.mktemp("slurm-cluster"), nodes=3, netns=True) as cluster:
        yield cluster


@pytest.fixture
def clean_slurm_cluster(slurm_cluster: TestCluster) -> Iterator[TestCluster]:
    """The session cluster, reset (no jobs, all nodes up) before and after the test."""
    reset_cluster(slurm_cluster)
    yield slurm_cluster
    reset_cluster(slurm_cluster)
