"""`python -m lamplighter.lab chaos`: the product's `lamplighter chaos`, plus node-crash on the lab's test cluster.

A node crash needs the test cluster (each slurmd in its own PID namespace, so
a node can really die), which the product never reaches: the lab hands its
crash function to the product's chaos command instead.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lamplighter.lab.testcluster import TestCluster
from lamplighter.slurm.job_cli import add_chaos_parser, run_chaos
from lamplighter.slurm.submission import Submission


def add_parser(subparsers: Any) -> None:
    p = add_chaos_parser(subparsers)
    p.add_argument(
        "--cluster-root",
        type=Path,
        default=None,
        help="the test cluster's folder (for node-crash; default: the folder of SLURM_CONF)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def crasher(s: Submission) -> Callable[[str], None] | None:
        root = args.cluster_root or (Path(s.slurm_conf).parent if s.slurm_conf else None)
        if root is None:
            return None
        # The cluster is opened when the fault fires, not before: most runs never crash a node.
        return lambda node: TestCluster(root).crash_node(node)

    return run_chaos(args, crasher)
