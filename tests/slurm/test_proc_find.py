"""Finding a node's daemon by its environment, among daemons of other test clusters with the same node names."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lamplighter.slurm.chaos.proc_find import ENV_SUPERVISOR_NODE, supervisor_procs


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[dict[str, int]]:
    """Stand-in daemons (real processes, only their environment matters): n2 of cluster a, n2 of cluster b,
    n2 started without SLURM_CONF (as systemd would), and n3 of cluster a."""
    base = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", ENV_SUPERVISOR_NODE)}
    kinds = {
        "a-n2": {ENV_SUPERVISOR_NODE: "n2", "SLURM_CONF": str(tmp_path / "a" / "slurm.conf")},
        "b-n2": {ENV_SUPERVISOR_NODE: "n2", "SLURM_CONF": str(tmp_path / "b" / "slurm.conf")},
        "bare-n2": {ENV_SUPERVISOR_NODE: "n2"},
        "a-n3": {ENV_SUPERVISOR_NODE: "n3", "SLURM_CONF": str(tmp_path / "a" / "slurm.conf")},
    }
    procs = {
        k: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={**base, **env})
        for k, env in kinds.items()
    }
    try:
        yield {k: p.pid for k, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
            p.wait(10)


def test_a_nodes_daemon_is_its_own_clusters_not_a_namesakes(tmp_path: Path, daemons: dict[str, int]) -> None:
    mine = {daemons[k] for k in daemons}

    def found(node: str, conf: str | None) -> set[int]:
        return {p.pid for p in supervisor_procs(node, conf)} & mine

    conf_a = tmp_path / "a" / "slurm.conf"
    assert found("n2", str(conf_a)) == {daemons["a-n2"], daemons["bare-n2"]}
    # The same file however it is spelled.
    assert found("n2", f"{tmp_path}/b/../a/slurm.conf") == {daemons["a-n2"], daemons["bare-n2"]}
    assert found("n2", None) == {daemons["a-n2"], daemons["b-n2"], daemons["bare-n2"]}
    assert found("n3", str(tmp_path / "b" / "slurm.conf")) == set()
