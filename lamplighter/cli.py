"""The `lamplighter` command line: one subcommand per user task, each defined next to the code it drives."""

from __future__ import annotations

import argparse
import importlib
import sys

from lamplighter import __version__

# Each module defines add_parser(subparsers); kept as names so `lamplighter --help` imports no torch.
# submit/status/cancel of a job whose config says `placement: bare-metal` go to etcd instead of Slurm.
BARE_ROUTER = "lamplighter.bare.job_cli"
ROUTED = ("submit", "status", "cancel")
# The lab's commands (test cluster, node-crash) are its own: python -m lamplighter.lab.
COMMAND_MODULES = [
    "lamplighter.configs.validate_cli",
    "lamplighter.slurm.render_cli",
    "lamplighter.supervisor.local_cli",
    "lamplighter.daemon.supervise_cli",
    "lamplighter.slurm.job_cli",
    "lamplighter.slurm.why_cli",
    "lamplighter.slurm.healthcheck_cli",
    "lamplighter.slurm.nodes_cli",
    "lamplighter.bare.job_cli",
    "lamplighter.gpusim.cli",
    "lamplighter.plan.plan_cli",
]

EPILOG = """\
a job, end to end:
  lamplighter validate configs/demo.yaml        check a config (file:line: key: problem)
  lamplighter local configs/demo.yaml           run it on this machine with faults injected
  lamplighter render configs/slurm-lab.yaml --out build/sbatch   the sbatch scripts, to read or edit
  lamplighter plan --gpus 4096 --model 8b       what faults would cost it, by strategy (a model)

environment:
  LAMPLIGHTER_SET="key.path=value;..."          config overrides applied before --set (not by root's
                                                supervise and healthcheck: only their --set counts)
  LAMPLIGHTER_GPUSIM_DIR                        the simulated GPUs' state folder (tests, demos)

exit status: 0 success, 1 the run failed, 2 bad input (invalid config or arguments)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lamplighter",
        description="Keeps fault-tolerant (torchft) PyTorch training running on Slurm and bare metal.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lamplighter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    func = args.func
    if args.command in ROUTED:
        func = importlib.import_module(BARE_ROUTER).route(args) or func
    try:
        return int(func(args))
    except KeyboardInterrupt:
        print("lamplighter: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `lamplighter status | head`: the reader left; not an error worth a traceback.
        sys.stderr.close()
        return 0
