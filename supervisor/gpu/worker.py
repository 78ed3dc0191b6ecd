"""Parent side of one probe worker: a killable child process speaking JSON lines.

Nothing here blocks: requests are single small writes, replies are read from a
non-blocking pipe when select() says so, and a killed worker is reaped later
(a process stuck in a driver call may not die at once).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

WorkerState = Literal["starting", "idle", "busy", "dead"]


@dataclass(frozen=True)
class WorkerSpec:
    """How to start workers: the interpreter, the amdsmi module name, and the environment (ROCM_PATH...)."""

    python: str = sys.executable
    module: str = "amdsmi"
    env: Mapping[str, str] | None = None

    def argv(self, index: int, bdf: str | None) -> list[str]:
        cmd = [
            self.python,
            "-m",
            "lamplighter.supervisor.gpu.worker_main",
            "--index",
            str(index),
            "--module",
            self.module,
        ]
        return cmd + (["--bdf", bdf] if bdf else [])


@dataclass
class ProbeWorker:
    """One GPU's worker process and where its conversation stands."""

    gpu: int
    spec: WorkerSpec
    bdf: str | None = None
    state: WorkerState = "dead"
    since: float = 0.0  # when the current state began (start or request time)
    proc: subprocess.Popen[bytes] | None = None
    _buf: bytes = b""
    _zombies: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, now: float) -> None:
        env = dict(self.spec.env) if self.spec.env is not None else None
        self.proc = subprocess.Popen(
            self.spec.argv(self.gpu, self.bdf),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._buf = b""
        self.state, self.since = "starting", now

    def fileno(self) -> int | None:
        if self.proc is None or self.proc.stdout is None or self.state == "dead":
            return None
        return self.proc.stdout.fileno()

    def request(self, now: float) -> bool:
        """Ask for one probe; False if the worker is gone (broken pipe)."""
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(b"probe\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        self.state, self.since = "busy", now
        return True

    def read_messages(self) -> tuple[list[dict[str, Any]], bool]:
        """Messages available now, and whether the worker closed its end (exited)."""
        if self.proc is None or self.proc.stdout is None:
            return [], True
        eof = False
        while True:
            try:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            if not chunk:
                eof = True
                break
            self._buf += chunk
        msgs: list[dict[str, Any]] = []
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            if line.strip():
                try:
                    msgs.append(json.loads(line))
                except json.JSONDecodeError:
                    msgs.append({"type": "error", "message": f"unparsable worker output: {line[:200]!r}"})
        return msgs, eof

    def kill(self) -> None:
        """SIGKILL without waiting; reaped by reap() on later cycles."""
        if self.proc is not None:
            try:
                self.proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
            self._zombies.append(self.proc)
        self.proc, self.state = None, "dead"

    def reap(self) -> None:
        self._zombies = [p for p in self._zombies if p.poll() is None]

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None
