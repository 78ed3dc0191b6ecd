"""`python -m lamplighter.lab cluster up|down|crash-node|restart-node|status`: the single-machine Slurm test cluster."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lamplighter.lab.testcluster import ClusterError, TestCluster, slurm_installed
from lamplighter.slurm.run import SlurmError


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("cluster", help="a real Slurm test cluster on this machine (munged, slurmctld, N slurmd)")
    p.add_argument("action", choices=["up", "down", "crash-node", "restart-node", "status"])
    p.add_argument("node", nargs="?", help="node name for crash-node / restart-node (n1, n2, ...)")
    p.add_argument("--dir", default="build/cluster", help="cluster folder (default: build/cluster)")
    p.add_argument("--nodes", type=int, default=3, help="number of nodes for `up` (default: 3)")
    p.add_argument(
        "--shared-loopback",
        action="store_true",
        help="for `up`: every node on this machine's network and host name, not a machine of its own each (a "
        "job's Lighthouse then needs lighthouse.host of this machine; default: a namespace, name and address a node)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    nodes = args.nodes
    conf = root / "slurm.conf"
    if args.action != "up" and conf.exists():
        # Later commands learn the node count from the cluster's own slurm.conf.
        nodes = _nodes_in_conf(conf.read_text()) or nodes
    cluster = TestCluster(root, nodes=nodes, netns=args.action == "up" and not args.shared_loopback)
    try:
        if args.action == "up":
            missing = slurm_installed()
            if missing:
                print(f"python -m lamplighter.lab cluster: {missing}", file=sys.stderr)
                return 1
            cluster.up()
            print(f"cluster of {nodes} node(s) up under {cluster.root}; for Slurm commands:")
            print(cluster.export_line())
        elif args.action == "down":
            cluster.down()
            print(f"cluster under {cluster.root} stopped")
        elif args.action in ("crash-node", "restart-node"):
            if not args.node:
                print(
                    f"python -m lamplighter.lab cluster {args.action}: name a node ({', '.join(cluster.node_names)})",
                    file=sys.stderr,
                )
                return 2
            if args.action == "crash-node":
                cluster.crash_node(args.node)
            else:
                cluster.restart_node(args.node)
            print(f"{args.action}: {args.node} done")
        else:
            status: dict[str, Any] = {"dir": str(cluster.root), "daemons": cluster.status()}
            try:
                status["nodes"] = {n.name: n.state for n in cluster.node_infos()}
            except SlurmError as e:
                status["nodes"] = f"unreachable: {e}"
            print(json.dumps(status, indent=2))
            print(cluster.export_line())
    except (ClusterError, SlurmError, ValueError, OSError) as e:
        print(f"python -m lamplighter.lab cluster {args.action} ({cluster.root}): {e}", file=sys.stderr)
        return 1
    return 0


def _nodes_in_conf(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("NodeName=n[1-"):
            return int(line.split("[1-", 1)[1].split("]", 1)[0])
    return None
