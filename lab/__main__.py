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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    cluster_cli.add_parser(sub)
    chaos_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("python -m lamplighter.lab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
