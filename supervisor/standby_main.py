"""A warm standby: a Python process that imports the trainer's heavy modules, then waits to become a trainer.

    python -m lamplighter.supervisor.standby_main [--preload MODULE ...]

A restart pays `import torch` and torchft (about 2 s here, more on a node with
ROCm) before the trainer does anything. A standby has paid it already: when a
restart is decided, its owner sends one JSON line on the standby's stdin, a
Unix socket (the trainer's argv, full environment, working directory, and a
log file or, on Slurm, the task's own stdout and stderr passed along with a
connection to the task), and the process runs that trainer in place, as
`python -m MODULE ...` or `python SCRIPT ...` would, with the same exit codes.
End of input before a line means "not needed" (or the owner died): it exits 0.

On Slurm (slurm/warm_task.py is the other end) the trainer writes
`started PID` and, as the very last thing it does, `exit CODE` on that
connection, and takes `signal N` lines from it; if the task goes away first,
the trainer kills itself: it must never outlive the Slurm task that stands
for it.

Only the standard library and the preloaded modules are imported here, and
nothing runs at import: modules that read the environment when imported see
the standby's (the supervisor's, as a cold start would, less the group's own
variables, which the trainer reads at run time).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import os
import pkgutil  # noqa: F401 - runpy.run_path imports it late: after a drop to a user who may not read our venv
import pwd
import runpy
import signal
import socket
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Any, NoReturn

READY = "lamplighter-standby: ready"  # printed once the preload is done (stdout is the standby's own log then)
TASK_FDS = 3  # passed with a log-less activation: the task's stdout, its stderr, the connection to the task
MAX_FDS = 8


@dataclass(frozen=True)
class Activation:
    """What the owner sends: the trainer this process becomes.

    `log` "" means the task's descriptors come with the line (TASK_FDS); `uid`/`gid`, the user it runs as
    (a standby of a root service drops to the task's user; None: stay as is)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    log: str
    uid: int | None = None
    gid: int | None = None

    @staticmethod
    def parse(line: str) -> Activation:
        try:
            raw: Any = json.loads(line)
            act = Activation(
                argv=list(raw["argv"]),
                env=dict(raw["env"]),
                cwd=str(raw["cwd"]),
                log=str(raw["log"]),
                uid=None if raw.get("uid") is None else int(raw["uid"]),
                gid=None if raw.get("gid") is None else int(raw["gid"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"standby: bad activation line {line[:200]!r}: {e}") from e
        if len(target_of(act.argv)) != 2:
            raise ValueError(f"standby: cannot run {act.argv!r} in place")
        return act

    def line(self) -> str:
        raw = {"argv": self.argv, "env": self.env, "cwd": self.cwd, "log": self.log, "uid": self.uid, "gid": self.gid}
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


def become(act: Activation, fds: list[int]) -> NoReturn:
    """Turn this process into the trainer: its user, output, directory, environment and argv, then run it."""
    sys.stdout.flush()
    sys.stderr.flush()
    task: socket.socket | None = None
    if act.log:
        fd = os.open(act.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    else:
        if len(fds) != TASK_FDS:
            raise SystemExit(f"standby: expected {TASK_FDS} descriptors with a log-less activation, got {len(fds)}")
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        os.close(fds[0])
        os.close(fds[1])
        task = socket.socket(fileno=fds[2])
        task.setblocking(True)  # the service's timeout made the shared descriptor non-blocking
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # as a cold start: the trainer reads nothing from the supervisor
    os.close(devnull)
    become_user(act.uid, act.gid)
    os.chdir(act.cwd)
    os.environ.clear()
    os.environ.update(act.env)
    code: list[int] = []
    if task is not None:
        bind_to_task(task)
        atexit.register(report_exit, task, code)
    code.append(run_target(act.argv, act.cwd))
    sys.exit(code[0])


def become_user(uid: int | None, gid: int | None) -> None:
    """Drop root to the task's user (a standby of the root service runs as root until a task of some user takes it)."""
    if uid is None or os.getuid() != 0 or uid == 0:
        return
    gid = uid if gid is None else gid
    try:
        groups = os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)
    except KeyError:  # a uid with no passwd entry (a container's): its own group only
        groups = [gid]
    os.setgroups(groups)
    os.setgid(gid)
    os.setuid(uid)


def bind_to_task(task: socket.socket) -> None:
    """Tell the task who runs for it, take the signals it forwards, and die if it goes first.

    Signals travel as `signal N` lines, not by PID: on a node in its own PID namespace the task
    cannot name this process, and this process reports its exit code last of all (report_exit)."""
    task.sendall(f"started {os.getpid()}\n".encode())

    def watch() -> None:
        buf = b""
        try:
            while data := task.recv(4096):
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    word, _, num = line.decode(errors="replace").partition(" ")
                    if word == "signal" and num.isdigit():
                        os.kill(os.getpid(), int(num))
        except OSError:
            pass
        kill_group()  # the Slurm task that stood for this trainer is gone

    threading.Thread(target=watch, name="lamplighter-task-watch", daemon=True).start()


def kill_group() -> None:
    """SIGKILL this trainer and what it started (torchrun's workers, data loaders): the standby leads its own
    process group, as Slurm would kill a whole step."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


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


def recv_line(sock: socket.socket, max_bytes: int = 1 << 30) -> tuple[bytes, list[int]]:
    """Bytes up to a newline (or the peer's end, or past max_bytes) and the descriptors that came with them.

    A line is read whole before anything acts on it: the descriptors travel with its first bytes. On an error
    the descriptors received so far are closed."""
    buf, fds = b"", []
    try:
        while not buf.endswith(b"\n") and len(buf) <= max_bytes:
            data, got, _flags, _addr = socket.recv_fds(sock, 1 << 16, MAX_FDS)
            fds += got
            if not data:
                break
            buf += data
    except BaseException:
        for f in fds:
            os.close(f)
        raise
    return buf, fds


def wait_for_activation(fd: int = 0) -> tuple[Activation, list[int]] | None:
    """One JSON line on `fd`, a Unix socket (its owner's end of a socketpair), and the descriptors it carries."""
    sock = socket.socket(fileno=os.dup(fd))
    try:
        buf, fds = recv_line(sock)
    finally:
        sock.close()
    if not buf.strip():
        for f in fds:
            os.close(f)
        return None
    return Activation.parse(buf.decode()), fds


def report_exit(task: socket.socket, code: list[int]) -> None:
    """Registered before the trainer runs, so atexit calls it after the trainer's own handlers: the task
    ends (and Slurm moves on) only once the trainer has finished everything it does at exit."""
    if code:
        try:
            task.sendall(f"exit {code[0]}\n".encode())
        except OSError:
            pass  # the task is gone; the watch thread kills this process anyway


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
    got = wait_for_activation()
    if got is None:
        return 0
    become(*got)


if __name__ == "__main__":
    sys.exit(main())
