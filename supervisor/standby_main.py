"""A warm standby: a Python process that imports the trainer's heavy modules, then waits to become a trainer.

    python -m lamplighter.supervisor.standby_main [--preload MODULE ...]

A restart pays `import torch` and torchft (about 2 s here, more on a node with
ROCm) before the trainer does anything. A standby has paid it already: when a
restart is decided, the supervisor writes one JSON line to its stdin (the
trainer's argv, full environment, working directory and log file) and the
process runs that trainer in place, as `python -m MODULE ...` or
`python SCRIPT ...` would, with the same exit codes. End of input before a
line means "not needed": it exits 0.

Only the standard library and the preloaded modules are imported here, and
nothing runs at import: modules that read the environment when imported see
the standby's (the supervisor's, as a cold start would, less the group's own
variables, which the trainer reads at run time).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import sys
from dataclasses import dataclass
from typing import Any, NoReturn, TextIO

READY = "lamplighter-standby: ready"  # printed once the preload is done (stdout is the standby's own log then)


@dataclass(frozen=True)
class Activation:
    """What the supervisor sends: the trainer this process becomes."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    log: str

    @staticmethod
    def parse(line: str) -> Activation:
        try:
            raw: Any = json.loads(line)
            act = Activation(argv=list(raw["argv"]), env=dict(raw["env"]), cwd=str(raw["cwd"]), log=str(raw["log"]))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"standby: bad activation line {line[:200]!r}: {e}") from e
        if len(target_of(act.argv)) != 2:
            raise ValueError(f"standby: cannot run {act.argv!r} in place")
        return act

    def line(self) -> str:
        return json.dumps({"argv": self.argv, "env": self.env, "cwd": self.cwd, "log": self.log}) + "\n"


def target_of(argv: list[str]) -> tuple[str, ...]:
    """("module", NAME) or ("path", SCRIPT) when argv is `python -m NAME ...` or `python SCRIPT ...` with no
    interpreter options; () when a standby cannot run it in place (another program, or options it would
    have to honour at start)."""
    if len(argv) >= 3 and argv[1] == "-m" and argv[2] and not argv[2].startswith("-"):
        return ("module", argv[2])
    if len(argv) >= 2 and argv[1] and not argv[1].startswith("-"):
        return ("path", argv[1])
    return ()


def become(act: Activation) -> NoReturn:
    """Turn this process into the trainer: its log, directory, environment and argv, then run it."""
    fd = os.open(act.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # as a cold start: the trainer reads nothing from the supervisor
    os.close(devnull)
    os.chdir(act.cwd)
    os.environ.clear()
    os.environ.update(act.env)
    kind, name = target_of(act.argv)
    rest = act.argv[3:] if kind == "module" else act.argv[2:]
    if kind == "module":
        sys.path[0] = act.cwd  # what `python -m` puts first
        sys.argv = [name, *rest]  # runpy replaces argv[0] with the module's file
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(name))  # what `python SCRIPT` puts first
        sys.argv = [name, *rest]
        runpy.run_path(name, run_name="__main__")
    sys.exit(0)


def wait_for_activation(stdin: TextIO) -> Activation | None:
    line = stdin.readline()
    return Activation.parse(line) if line.strip() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lamplighter.supervisor.standby_main",
        description="Import MODULEs, then wait on stdin for one JSON line naming the trainer to become.",
    )
    parser.add_argument("--preload", action="append", default=[], metavar="MODULE", help="a module to import now")
    args = parser.parse_args(argv)
    for name in args.preload:
        importlib.import_module(name)  # an ImportError fails the standby now, not the restart that needs it
    print(f"{READY} (pid {os.getpid()})", flush=True)
    act = wait_for_activation(sys.stdin)
    if act is None:
        return 0
    become(act)


if __name__ == "__main__":
    sys.exit(main())
