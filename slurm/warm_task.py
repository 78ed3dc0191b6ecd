"""The task side of a warm start on Slurm: ask this node's `lamplighter standby` for a standby to become the trainer.

    python -m lamplighter.slurm.warm_task --socket PATH -- TRAINER ARGV...

A rendered group script runs this as each task when the job sets
slurm.standby_socket. It sends the standby service its trainer argv, its
environment (Slurm's and lamplighter's), its directory, and its own stdout and
stderr; the service passes them, with this connection, to an idle standby, which
becomes the trainer (supervisor/standby_main.py). This process stays the
Slurm task: it forwards the signals Slurm sends to the trainer (as lines on
the connection) and exits with the trainer's exit code. If it is killed, the
trainer kills itself; the service kills one that cannot (stopped).
The trainer runs outside the step's cgroup (the standby service started it):
Slurm's accounting and device constraints do not see it.

Anything short of a standby that says "started" (no service, no idle
standby, another interpreter, a command that cannot run in place) starts
the trainer cold, exactly as the task wrapper would have, and says why on
stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
from types import FrameType
from typing import NoReturn

CONNECT_TIMEOUT_S = 2.0
ANSWER_TIMEOUT_S = 10.0  # the service answers from its own thread; a standby says "started" at once
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGCONT,
)
PREFIX = "lamplighter warm_task:"


def socket_path(template: str, env: dict[str, str]) -> str:
    """`%n` is the node's name (several node names share one machine on a test cluster)."""
    node = env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    return template.replace("%n", node)


def request_line(argv: list[str], env: dict[str, str], cwd: str) -> bytes:
    return (json.dumps({"argv": argv, "env": env, "cwd": cwd}) + "\n").encode()


def start_cold(argv: list[str], why: str) -> NoReturn:
    print(f"{PREFIX} starting cold: {why}", file=sys.stderr, flush=True)
    os.execvp(argv[0], argv)


class _Lines:
    """Lines from a stream socket, one at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def next(self) -> str | None:
        while b"\n" not in self.buf:
            data = self.sock.recv(4096)
            if not data:
                return None
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace")


def ask(path: str, argv: list[str]) -> tuple[socket.socket, _Lines, int] | str:
    """The connection to a standby that now runs `argv` (and its pid), or why there is none."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(CONNECT_TIMEOUT_S)
        conn.connect(path)
        conn.settimeout(ANSWER_TIMEOUT_S)
        data = request_line(argv, dict(os.environ), os.getcwd())
        sent = socket.send_fds(conn, [data], [1, 2])
        if sent < len(data):
            conn.sendall(data[sent:])
        lines = _Lines(conn)
        answer = lines.next()
    except OSError as e:
        conn.close()
        return f"no standby at {path}: {e}"
    if answer is None:
        conn.close()
        return f"the standby service at {path} hung up before a standby started"
    word, _, rest = answer.partition(" ")
    if word == "started" and rest.isdigit():
        conn.settimeout(None)
        return conn, lines, int(rest)
    conn.close()
    return rest if word == "cold" else f"unexpected answer from {path}: {answer[:200]!r}"


def forward_signals(conn: socket.socket) -> None:
    """Over the connection, not by PID: this task may sit in a PID namespace where the trainer has none."""

    def forward(signum: int, frame: FrameType | None) -> None:
        try:
            conn.sendall(f"signal {signum}\n".encode())
        except OSError:
            pass  # the trainer is gone; its exit (or the connection's end) is read next

    for sig in FORWARDED:
        signal.signal(sig, forward)


def wait_for_exit(lines: _Lines, pid: int) -> NoReturn:
    """Exit as the trainer did; killed (SIGKILL) when it died without saying, as a killed cold trainer's task."""
    while (line := lines.next()) is not None:
        word, _, rest = line.partition(" ")
        if word == "exit":
            sys.exit(int(rest))
    print(f"{PREFIX} the trainer (pid {pid}) ended without an exit status: it was killed", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lamplighter.slurm.warm_task",
        description="Run TRAINER in a warm standby of this node (`lamplighter standby`); cold when there is none.",
    )
    parser.add_argument("--socket", required=True, help="the node's standby socket (%%n: this node's name)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the trainer's argv")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no trainer command after --")
    got = ask(socket_path(args.socket, dict(os.environ)), command)
    if isinstance(got, str):
        start_cold(command, got)
    conn, lines, pid = got  # the connection stays open: the trainer kills itself when it closes
    forward_signals(conn)
    print(f"{PREFIX} the trainer runs warm as pid {pid}", file=sys.stderr, flush=True)
    wait_for_exit(lines, pid)


if __name__ == "__main__":
    sys.exit(main())
