"""A warm standby: a Python process that imports the trainer's heavy modules, then waits to become a trainer.

    python -m lamplighter.launch.standby [--preload MODULE ...]

A restart pays `import torch` and torchft (about 2 s here, more on a node with
ROCm) before the trainer does anything. A standby has paid it already: when a
restart is decided, its owner sends one JSON line on the standby's stdin (the
trainer's argv, environment and working directory), and the process runs that
trainer in place, as `python -m MODULE ...` or `python SCRIPT ...` would, with
the same exit codes. End of input before a line means "not needed" (or the
owner died): it exits 0.

Two owners, both the trainer's own user: local mode's pool (standby.py: stdin
a Unix socket, the whole environment and a log file in the line), and a
Slurm group's in-job agent (slurm/injob/steps.py: stdin a pipe that srun forwards to
every task of the spare step; the line holds only the variables that changed,
`merge_env`, and the output stays the task's). A standby never changes user:
it already runs as the trainer will, in the job's own cgroup on Slurm.

Only the standard library, lamplighter's bounded reader (standard library
only itself) and the preloaded modules are imported here, and nothing runs at import: modules that read the environment when imported see
the standby's (as a cold start would, less what the line changes, which the
trainer reads at run time).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil  # noqa: F401 - runpy.run_path imports it late
import runpy
import socket
import stat
import sys
import traceback
from dataclasses import dataclass
from typing import Any, NoReturn

from lamplighter.rundir.bounded_read import read_bounded

READY = "lamplighter-standby: ready"  # printed once the preload is done (stdout is the standby's own log then)
MAX_LINE = 1 << 24


@dataclass(frozen=True)
class Activation:
    """What the owner sends: the trainer this process becomes.

    `log`: a file for the trainer's output ("" keeps the standby's own); `merge_env`: `env` holds only
    what changes, on top of the standby's own environment (else it is the whole environment)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    log: str = ""
    merge_env: bool = False

    @staticmethod
    def parse(line: str) -> Activation:
        try:
            raw: Any = json.loads(line)
            act = Activation(
                argv=[str(a) for a in raw["argv"]],
                env={str(k): str(v) for k, v in dict(raw["env"]).items()},
                cwd=str(raw["cwd"]),
                log=str(raw.get("log") or ""),
                merge_env=bool(raw.get("merge_env", False)),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"standby: bad activation line {line[:200]!r}: {e}") from e
        if len(target_of(act.argv)) != 2:
            raise ValueError(f"standby: cannot run {act.argv!r} in place")
        return act

    def line(self) -> str:
        raw = {"argv": self.argv, "env": self.env, "cwd": self.cwd, "log": self.log, "merge_env": self.merge_env}
        return json.dumps(raw) + "\n"


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
    """Turn this process into the trainer: its output, directory, environment and argv, then run it."""
    sys.stdout.flush()
    sys.stderr.flush()
    if act.log:
        fd = os.open(act.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # as a cold start: the trainer reads nothing from its owner
    os.close(devnull)
    os.chdir(act.cwd)
    if not act.merge_env:
        os.environ.clear()
    os.environ.update(act.env)
    sys.exit(run_target(act.argv, act.cwd))


def run_target(argv: list[str], cwd: str) -> int:
    """Run `python -m MODULE ...` or `python SCRIPT ...` in this process; its exit code, as Python would give it."""
    kind, name = target_of(argv)
    rest = argv[3:] if kind == "module" else argv[2:]
    # The task's PYTHONPATH, where a fresh interpreter puts it: right after the script's folder.
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[1:1] = extra
    try:
        if kind == "module":
            sys.path[0] = cwd  # what `python -m` puts first
            sys.argv = [name, *rest]  # runpy replaces argv[0] with the module's file
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(os.path.abspath(name))  # what `python SCRIPT` puts first
            sys.argv = [name, *rest]
            runpy.run_path(name, run_name="__main__")
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def read_line(fd: int = 0, max_bytes: int = MAX_LINE) -> bytes:
    """Bytes up to a newline or the end of input, from a socket (local mode) or a pipe (srun); TooLarge past
    max_bytes."""
    sock = socket.socket(fileno=os.dup(fd)) if stat.S_ISSOCK(os.fstat(fd).st_mode) else None
    try:
        return read_bounded(sock.recv if sock is not None else lambda n: os.read(fd, n), max_bytes, until=b"\n")
    finally:
        if sock is not None:
            sock.close()


def wait_for_activation(fd: int = 0) -> Activation | None:
    """One JSON line on `fd`; None at the end of input before one (not needed)."""
    buf = read_line(fd)
    return Activation.parse(buf.decode()) if buf.strip() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lamplighter.launch.standby",
        description="Import MODULEs, then wait on stdin for one JSON line naming the trainer to become.",
    )
    parser.add_argument("--preload", action="append", default=[], metavar="MODULE", help="a module to import now")
    args = parser.parse_args(argv)
    for name in args.preload:
        importlib.import_module(name)  # an ImportError fails the standby now, not the restart that needs it
    print(f"{READY} (pid {os.getpid()})", flush=True)
    act = wait_for_activation()
    if act is None:
        return 0
    become(act)


if __name__ == "__main__":
    sys.exit(main())
