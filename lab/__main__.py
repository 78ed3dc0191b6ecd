"""`python -m lamplighter.lab COMMAND`: the lab's own commands, apart from the product's `lamplighter` CLI.

cluster up|down|crash-node|restart-node|status   the single-machine Slurm test cluster
chaos JOB --once node-crash ...                  `lamplighter chaos`, plus node-crash on that cluster
"""

from __future__ import annotations

import argparse
import sys

from lamplighter.lab import chaos_cli, cluster_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lamplighter.lab", description="lamplighter's test rig")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    cluster_cli.add_parser(sub)
    chaos_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
