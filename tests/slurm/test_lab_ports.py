"""A lab job's Lighthouse port is never the port its cluster's slurmd binds inside the nodes' networks.

CI once drew the job port 22248 for a cluster whose slurmctld had 22247: the head's slurmd held 22248 in its
namespace (invisible to a bind on the host), and the Lighthouse could not listen there."""

from __future__ import annotations

import random
from pathlib import Path

from lamplighter.lab.slurm_lab import LabSettings, SlurmLab
from lamplighter.lab.testcluster import pick_port_range


class Draws(random.Random):
    """randrange gives these bases in turn."""

    def __init__(self, bases: list[int]) -> None:
        super().__init__(0)
        self.bases = list(bases)

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:  # type: ignore[override]
        return self.bases.pop(0)


def test_a_port_in_avoid_is_drawn_again() -> None:
    assert pick_port_range(1, Draws([22248, 22250]), avoid=range(22247, 22249)) == 22250


def test_a_range_touching_avoid_is_drawn_again() -> None:
    assert pick_port_range(2, Draws([22246, 22250]), avoid=[22247]) == 22250


def test_the_lab_job_port_is_none_of_its_clusters_ports(tmp_path: Path) -> None:
    for netns in (True, False):
        lab = SlurmLab(tmp_path / str(netns), LabSettings(compute_nodes=3, netns=netns))
        ports = lab.cluster.ports()  # slurmctld, then the head and 3 nodes (one port in the netns)
        assert lab.job_port not in ports and lab.new_job_port() not in ports
        assert len(ports) == (2 if netns else 5) and lab.cluster.ports() == ports  # picked once
