"""`python -m lamplighter.lab chaos`: the product's `lamplighter chaos`, plus the test cluster's own faults.

node-crash, partition and slurmctld-restart need the test cluster (each
slurmd in its own PID namespace, so a node can really die or be cut off; a
controller this lab started), which the product never reaches: the lab hands
its cluster to the product's chaos command instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lamplighter.commands.job import add_chaos_parser, run_chaos
from lamplighter.lab.testcluster import TestCluster
from lamplighter.slurm.submit.submission import Submission


def add_parser(subparsers: Any) -> None:
    p = add_chaos_parser(subparsers)
    p.add_argument(
        "--cluster-root",
        type=Path,
        default=None,
        help="the test cluster's folder (for node-crash, partition, slurmctld-restart; default: the folder of SLURM_CONF)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def open_cluster(s: Submission) -> TestCluster | None:
        root = args.cluster_root or (Path(s.slurm_conf).parent if s.slurm_conf else None)
        return None if root is None else TestCluster(root)

    return run_chaos(args, open_cluster)
