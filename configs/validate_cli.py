"""`lamplighter validate FILE`: check a job (or node) config without starting anything."""

from __future__ import annotations

import argparse
import json
import os
import sys

from lamplighter.configs.loader import ENV_OVERRIDES, ConfigError, load_job, load_node
from lamplighter.configs.schema import JobConfig

EXIT_INVALID = 2


def add_override_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a config value, e.g. --set lighthouse.port=29511 (repeatable; applied after ${ENV_OVERRIDES})",
    )


def report_invalid(e: ConfigError) -> int:
    """Print every problem of an invalid config on stderr; returns the exit status for bad input."""
    for problem in e.problems:
        print(f"error: {problem}", file=sys.stderr)
    return EXIT_INVALID


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check a job or node config; exit 0 if it is usable, 2 if not",
        description=(
            "Check a config file against the schema and the torchft timeout hierarchy. Every problem is "
            "reported with its file, line and key. Nothing is started or submitted. Exit status: 0 valid, "
            "2 invalid."
        ),
        epilog="examples:\n  lamplighter validate configs/demo.yaml\n"
        "  lamplighter validate --node /etc/lamplighter/node.yaml\n"
        "  lamplighter validate configs/slurm-lab.yaml --set groups.count=4 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", help="YAML config file")
    p.add_argument("--node", action="store_true", help="the file is a node supervisor config (node.yaml)")
    p.add_argument("--json", action="store_true", help="print the resolved config (defaults filled in) as JSON")
    add_override_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = (load_node if args.node else load_job)(args.file, args.overrides, os.environ)
    except ConfigError as e:
        report_invalid(e)
        print(f"{args.file}: invalid ({len(e.problems)} problem{'s' * (len(e.problems) != 1)})", file=sys.stderr)
        return EXIT_INVALID
    if args.json:
        print(json.dumps(cfg.model_dump(mode="json"), indent=2))
    elif isinstance(cfg, JobConfig):
        print(summary(cfg, args.file))
    else:
        print(f"{args.file}: valid node config (role {cfg.role})")
    return 0


def summary(job: JobConfig, source: str) -> str:
    g, lh, ft = job.groups, job.lighthouse, job.torchft
    return "\n".join(
        [
            f"{source}: valid job '{job.name}'",
            f"  groups      {g.count} x {g.nodes} node(s) x {g.nproc_per_node} process(es), {g.gpus_per_node} GPU(s)/node",
            f"  lighthouse  {lh.host}:{lh.port}  min_replicas={lh.min_replicas}  heartbeat_timeout={lh.heartbeat_timeout_ms}ms"
            f"  join_timeout={lh.join_timeout_ms}ms  tick={lh.quorum_tick_ms}ms",
            f"  torchft     pg_timeout={ft.pg_timeout_s}s  timeout={ft.timeout_s}s  quorum_timeout={ft.quorum_timeout_s}s"
            f"  hang_timeout={job.health.hang_timeout_s}s",
            f"  trainer     {' '.join(job.trainer.command) if job.trainer.command else 'reference trainer'}"
            f"  to step {job.trainer.steps}",
            f"  run_dir     {job.run_dir or 'runs/' + job.name}",
        ]
    )
