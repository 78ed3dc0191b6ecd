"""Run torchft's Lighthouse on this machine, and bring it back on the same address when it dies.

The port is fixed once (a free one when the config says 0) and kept across
restarts: the trainers' Managers reconnect to the address they were given.
By default it is started through main.py (the same Rust server,
without importing torch: ~0.1 s instead of 1.5-6 s), so a restart fits well
inside torchft.quorum_timeout_s and the groups ride through it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from lamplighter.configs.schema import LighthouseConfig
from lamplighter.system.ports import accepts_connections, free_port
from lamplighter.system.process_tree import kill_tree


class LighthouseError(RuntimeError):
    """The Lighthouse could not be started or did not come up; the message says which address and why."""


def lighthouse_binary() -> Path:
    """torchft_lighthouse next to this interpreter (the venv's bin directory)."""
    return Path(sys.executable).parent / "torchft_lighthouse"


def fast_command() -> list[str]:
    return [sys.executable, "-m", "lamplighter.lighthouse.main"]


def bind_address(host: str, port: int) -> str:
    """HOST:PORT for --bind, an IPv6 address in brackets (torchft parses the port after the last colon)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def lighthouse_argv(
    cfg: LighthouseConfig,
    port: int,
    command: list[str],
    bind_host: str | None = None,
    remember: Path | None = None,
    on_its_node: bool = False,
) -> list[str]:
    """torchft_lighthouse's flags from the config, bound to cfg.host (the address the job names) unless
    bind_host says otherwise. Never a wildcard by default: torchft's Lighthouse has no authentication
    (its dashboard kills replicas), so it listens only where the job's groups reach it (deploy/SECURITY.md).

    remember: main.py's memory file (memory.py); torchft's own script has no such flag.
    on_its_node: bind the address of the node it runs on, found there (main.py's --bind-node-port)."""
    grace = 2000 if cfg.restart_grace_ms is None else cfg.restart_grace_ms  # None: outside a job's config
    extra = [] if remember is None else ["--remember", str(remember), "--restart-grace-ms", str(grace)]
    return [
        *command,
        *(
            ["--bind-node-port", str(port)]
            if on_its_node
            else ["--bind", bind_address(bind_host or cfg.local_host, port)]
        ),
        "--min_replicas",
        str(cfg.min_replicas),
        "--join_timeout_ms",
        str(cfg.join_timeout_ms),
        "--quorum_tick_ms",
        str(cfg.quorum_tick_ms),
        "--heartbeat_timeout_ms",
        str(cfg.heartbeat_timeout_ms),
        *extra,
    ]


class Lighthouse:
    """One Lighthouse process at a time, on a port that does not change."""

    def __init__(
        self, cfg: LighthouseConfig, log_path: Path, command: list[str] | None = None, remember: Path | None = None
    ) -> None:
        """command: how to run it (default: lighthouse/main.py; [str(lighthouse_binary())] for torchft's script).
        remember: main.py's memory file, so that a restart stands in for the replicas alive before."""
        self.cfg = cfg
        self._remember = remember if command is None else None
        self.port = cfg.port or free_port(cfg.local_host)
        self._log_path = log_path
        self._command = command or fast_command()
        self.popen: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None

    @property
    def address(self) -> str:
        return f"http://{bind_address(self.cfg.local_host, self.port)}"

    def start(self, now: float) -> int:
        """Start it (not waiting for it to listen); returns its PID."""
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = lighthouse_argv(self.cfg, self.port, self._command, remember=self._remember)
        with open(self._log_path, "ab") as log:
            try:
                self.popen = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
                )
            except OSError as e:
                raise LighthouseError(f"cannot start the Lighthouse ({argv!r}): {e}") from e
        self.started_at = now
        return self.popen.pid

    def wait_ready(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        """Block until it accepts connections; raise LighthouseError if it exits or the timeout passes."""
        deadline = clock() + timeout_s
        while clock() < deadline:
            if self.popen is None or self.popen.poll() is not None:
                code = None if self.popen is None else self.popen.returncode
                raise LighthouseError(
                    f"Lighthouse on {self.address} exited ({code}) before accepting connections; see {self._log_path}"
                )
            if accepts_connections(self.cfg.local_host, self.port):
                return
            time.sleep(0.05)
        raise LighthouseError(
            f"Lighthouse on {self.address} did not accept connections within {timeout_s:g} s; see {self._log_path}"
        )

    def kill(self) -> None:
        """SIGKILL it (and anything it started) and reap it."""
        if self.popen is not None:
            kill_tree([self.popen])
