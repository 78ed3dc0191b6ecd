"""The `lamplighter` command line: one subcommand per user task, each defined next to the code it drives."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import os
import sys
from collections.abc import Callable
from typing import TextIO

# Each module defines add_parser(subparsers); kept as names so `lamplighter --help` imports no torch.
# submit/status/cancel of a job whose config says `placement: bare-metal` go to etcd instead of Slurm.
BARE_ROUTER = "lamplighter.commands.bare_jobs"
ROUTED = ("submit", "status", "cancel")
# The lab's commands (test cluster, node-crash) are its own: python -m lamplighter.lab.
COMMAND_MODULES = [
    "lamplighter.commands.init",
    "lamplighter.commands.validate",
    "lamplighter.commands.render",
    "lamplighter.commands.local",
    "lamplighter.commands.supervise",
    "lamplighter.commands.job",
    "lamplighter.commands.why",
    "lamplighter.commands.logs",
    "lamplighter.commands.jobs",
    "lamplighter.commands.revive",
    "lamplighter.commands.healthcheck",
    "lamplighter.commands.nodes",
    "lamplighter.commands.daemon_status",
    "lamplighter.commands.bare_jobs",
    "lamplighter.commands.plan",
    "lamplighter.commands.deploy_files",
    "lamplighter.commands.completion",
]
# The lab's commands, in a checkout only (the wheel carries no rig): `lamplighter gpusim` drives simulated GPUs.
RIG_COMMAND_MODULES = ["lamplighter.gpusim.cli"]
ENV_DEBUG = "LAMPLIGHTER_DEBUG"  # set: an unexpected error shows its traceback

EPILOG = """\
a job, end to end:
  lamplighter init --torchtitan > job.yaml      a commented starting point (or: init --custom)
  lamplighter validate configs/demo.yaml        check a config (file:line: key: problem)
  lamplighter local configs/demo.yaml           run it on this machine with faults injected
  lamplighter render configs/slurm-lab.yaml --out build/sbatch   the sbatch scripts, to read or edit
  lamplighter plan --gpus 4096 --model 8b       what faults would cost it, by strategy (a model)

environment:
  LAMPLIGHTER_SET="key.path=value;..."          config overrides applied before --set (not by root's
                                                supervise and healthcheck: only their --set counts)
  LAMPLIGHTER_GPUSIM_DIR                        the simulated GPUs' state folder (tests, demos)
  LAMPLIGHTER_DEBUG=1                           an unexpected error shows its traceback

shell completion:  lamplighter completion bash > /etc/bash_completion.d/lamplighter   (or zsh)

exit status: 0 success, 1 the run failed, 2 bad input (invalid config or arguments)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lamplighter",
        description="Keeps fault-tolerant (torchft) PyTorch training running on Slurm and bare metal.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="store_true",
        help="lamplighter's version, and torchft's, torch's, amdsmi's, ROCm's and Slurm's here",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    for name in RIG_COMMAND_MODULES:
        if rig_installed(name):
            importlib.import_module(name).add_parser(sub)
    return parser


def rig_installed(module: str) -> bool:
    """Whether this install has the rig's package for module (a checkout does, the wheel does not)."""
    try:
        return importlib.util.find_spec(module.rsplit(".", 1)[0]) is not None
    except ModuleNotFoundError:
        return False


def print_version() -> int:
    from lamplighter.system.installed import version_text

    print(version_text())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--version"]:  # before the parser: it imports every command's module
        return print_version()
    parser = build_parser()
    try:
        with contextlib.redirect_stderr(io.StringIO()) as said:
            args = parser.parse_args(argv)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = argv[0] if argv and argv[0] in sub.choices else None
        return usage_error(said.getvalue(), argv, command)
    if args.version:
        return print_version()
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    func = args.func
    if args.command in ROUTED:
        func = importlib.import_module(BARE_ROUTER).route(args) or func
    if getattr(args, "json", False):
        return run_for_json(func, args)
    return run(func, args)


def run(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return int(func(args))
    except KeyboardInterrupt:
        print("lamplighter: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `lamplighter status | head`: the reader left; not an error worth a traceback.
        sys.stderr.close()
        return 0
    except Exception as e:  # a person reads one line with what to do; a developer sets LAMPLIGHTER_DEBUG
        if os.environ.get(ENV_DEBUG):
            raise
        print(f"lamplighter {args.command}: error: {one_line(e)}", file=sys.stderr)
        return 1


def one_line(e: BaseException) -> str:
    """An unexpected error in one line, with what to do about it."""
    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, OSError):
        return f"{text}: check that path (and its permissions); LAMPLIGHTER_DEBUG=1 shows where it was opened"
    return f"{type(e).__name__}: {text} (a bug: LAMPLIGHTER_DEBUG=1 shows the traceback for a report)"


def usage_error(said: str, argv: list[str], command: str | None = None) -> int:
    """argparse's complaint in one line that says where the usage is (and, with --json, as a JSON document).

    argparse prints the usage, then `prog: error: message`; the message is what was wrong."""
    lines = [line for line in said.splitlines() if line.strip()]
    last = lines[-1] if lines else "lamplighter: error: bad arguments"
    prog, _, message = last.partition(": error: ")
    prog = prog if message else "lamplighter"
    if prog == "lamplighter" and command:  # an argument the top parser was left with belongs to the command
        prog = f"lamplighter {command}"
    message = message or last
    print(f"{prog}: error: {message} (see {prog} --help)", file=sys.stderr)
    if "--json" in argv:
        print(json.dumps({"error": message, "command": prog, "exit_code": 2}))
    return 2


class _Tee(io.TextIOBase):
    """Passes writes through to a stream; keeps what stderr said, or notes that stdout said anything."""

    def __init__(self, to: TextIO, keep: bool) -> None:
        self.to, self.keep, self.text, self.wrote = to, keep, io.StringIO(), False

    def write(self, s: str) -> int:
        self.wrote = self.wrote or bool(s)
        if self.keep:
            self.text.write(s)
        return self.to.write(s)

    def flush(self) -> None:
        self.to.flush()

    def fileno(self) -> int:
        return self.to.fileno()

    def isatty(self) -> bool:
        return self.to.isatty()


def run_for_json(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """A --json command always prints a JSON document: on a failure with nothing on stdout, the error as one.

    The human line still goes to stderr; a program reading stdout gets {"error", "errors", "command",
    "exit_code"} instead of nothing."""
    out, err = _Tee(sys.stdout, keep=False), _Tee(sys.stderr, keep=True)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(func, args)
    if rc != 0 and not out.wrote:
        lines = [line.strip() for line in err.text.getvalue().splitlines() if line.strip()]
        errors = [line.partition(": error: ")[2] or line.removeprefix("error: ") for line in lines]
        said = [e for line, e in zip(lines, errors, strict=True) if ": error: " in line or line.startswith("error: ")]
        message = said[0] if said else None
        doc = {
            "error": message or (errors[-1] if errors else f"exited {rc}"),
            "errors": errors,
            "command": f"lamplighter {args.command}",
            "exit_code": rc,
        }
        print(json.dumps(doc))
    return rc
