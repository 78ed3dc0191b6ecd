"""Warm standbys on a Slurm node: `lamplighter standby` keeps them, a job's tasks take them (slurm/warm_task.py).

A task connects to the standby socket and sends one JSON line (its trainer
argv, environment and directory) with its stdout and stderr. The broker
answers `cold REASON` when no standby can run it (none idle, another
interpreter, a command that cannot run in place), or passes the line, the
descriptors and the connection itself to an idle standby, which becomes the
trainer, as the task's user (SO_PEERCRED), and answers `started PID` on that
connection. The trainer and its task then watch each other directly, and
outlive a restart of the service. The broker only kills a trainer whose task is gone
while it could not notice (stopped, say): none may outlive its Slurm task.

Used standbys are replaced `standby.refill_after_s` after the last one was
taken (a standby's imports would take the CPU from the trainer that just
started). The broker reaps the trainers it started (they are its children).
A `status` line instead of a request gets the counts, as JSON.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lamplighter.configs.schema import NodeStandbyConfig
from lamplighter.daemon.unix_server import UnixServer
from lamplighter.slurm.proc_find import ENV_SUPERVISOR_NODE
from lamplighter.supervisor import procfs
from lamplighter.supervisor.standby import StandbyPool
from lamplighter.supervisor.standby_main import recv_line

log = logging.getLogger(__name__)

SOCKET_MODE = 0o666  # any user's task may ask; the trainer then runs as that user
DIR_MODE = 0o755
REQUEST_TIMEOUT_S = 5.0
MAX_REQUEST_BYTES = 4 * 1024 * 1024
REQUEST_FDS = 2  # the task's stdout and stderr
STATUS_REQUEST = b"status\n"  # instead of a task's request: the counts, as one JSON line
# Variables of the service a trainer must not inherit: systemd's, and the lab's mark for a node daemon.
NOT_FOR_STANDBYS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", ENV_SUPERVISOR_NODE)


class RequestError(ValueError):
    """A task's request the broker cannot read; the message is what the task prints."""


def standby_env(env: Mapping[str, str]) -> dict[str, str]:
    out = {k: v for k, v in env.items() if k not in NOT_FOR_STANDBYS}
    out.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})  # as trainer_env sets before any import
    return out


def read_line(conn: socket.socket) -> tuple[bytes, list[int]]:
    """One line and the descriptors that came with it (closed again if the line cannot be read)."""
    conn.settimeout(REQUEST_TIMEOUT_S)
    try:
        buf, fds = recv_line(conn, max_bytes=MAX_REQUEST_BYTES)
    except OSError as e:
        raise RequestError(f"bad request: {type(e).__name__}: {e}") from e
    if len(buf) > MAX_REQUEST_BYTES or not buf.endswith(b"\n"):
        for f in fds:
            os.close(f)
        too_big = len(buf) > MAX_REQUEST_BYTES
        raise RequestError(
            f"request larger than {MAX_REQUEST_BYTES} bytes" if too_big else "the request ended before its line did"
        )
    return buf, fds


def parse_request(buf: bytes, fds: list[int]) -> dict[str, Any]:
    """A task's request: its argv, environment and directory, with its stdout and stderr."""
    try:
        raw = json.loads(buf)
        if len(fds) != REQUEST_FDS:
            raise RequestError(f"expected the task's stdout and stderr, got {len(fds)} descriptor(s)")
        return {"argv": [str(a) for a in raw["argv"]], "env": dict(raw["env"]), "cwd": str(raw["cwd"])}
    except (ValueError, KeyError, TypeError) as e:
        raise RequestError(e if isinstance(e, RequestError) else f"bad request: {type(e).__name__}: {e}") from e


def read_broker_status(path: Path, timeout: float = 5.0) -> dict[str, Any]:
    """The running broker's counts (`lamplighter standby --status`)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(STATUS_REQUEST)
        doc: dict[str, Any] = json.loads(s.makefile("rb").readline())
    return doc


def peer_user(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, from the kernel."""
    pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid, gid


def kill_group(p: subprocess.Popen[bytes]) -> None:
    """The trainer and what it started: a standby leads its own process group (start_new_session)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def task_alive(proc_root: Path, pid: int, start_time: int) -> bool:
    st = procfs.read_stat(proc_root, pid)
    return st is not None and st.start_time == start_time and st.state not in ("Z", "X")


class StandbyBroker(UnixServer):
    def __init__(self, cfg: NodeStandbyConfig, env: Mapping[str, str], log_dir: Path, now: float) -> None:
        super().__init__(Path(cfg.socket), "standby socket", mode=SOCKET_MODE, dir_mode=DIR_MODE)
        self.cfg = cfg
        self.pool = StandbyPool(
            size=cfg.count,
            python=cfg.python or sys.executable,
            preload=cfg.preload,
            env=standby_env(env),
            log_dir=log_dir,
            say=log.info,
        )
        self._lock = threading.Lock()  # the pool is used by the cycle and by the socket's thread
        self._last_take = now - cfg.refill_after_s
        self._taken = False
        # Trainers started from standbys (reaped here), with their task: (pid, start time) in our namespace.
        self.trainers: dict[int, tuple[subprocess.Popen[bytes], int, int]] = {}
        self._orphans: set[int] = set()  # trainers whose task was gone at the last cycle
        self.answers = {"warm": 0, "cold": 0}

    def cycle(self, now: float, proc_root: Path = procfs.PROC) -> None:
        """Reap ended trainers, kill those whose task is gone; refill the pool once none was taken for a while."""
        with self._lock:
            for pid, (p, task_pid, task_start) in list(self.trainers.items()):
                if p.poll() is not None:
                    del self.trainers[pid]
                    continue
                if task_alive(proc_root, task_pid, task_start):
                    continue
                # A trainer that reported its exit is still finishing when its task ends: one cycle's grace.
                if pid in self._orphans:
                    log.warning("trainer pid %d outlived its task pid %d by a cycle: killed", pid, task_pid)
                    kill_group(p)
                self._orphans.add(pid)
            self._orphans &= set(self.trainers)
            if self._taken:
                self._last_take, self._taken = now, False
            self.pool.refill(quiet=now - self._last_take >= self.cfg.refill_after_s)

    def answer(self, conn: socket.socket) -> None:
        try:
            buf, fds = read_line(conn)
        except RequestError as e:
            self._reply(conn, f"cold {e}")
            return
        try:
            if buf == STATUS_REQUEST:
                self._reply(conn, json.dumps(self.status()))
            else:
                self._hand_over(conn, parse_request(buf, fds), fds)
        except RequestError as e:
            self._reply(conn, f"cold {e}")
        finally:
            for f in fds:
                os.close(f)

    def _hand_over(self, conn: socket.socket, req: dict[str, Any], fds: list[int]) -> None:
        pid, uid, gid = peer_user(conn)
        if uid != os.getuid() and os.getuid() != 0:
            self._reply(
                conn, f"cold the standby service runs as uid {os.getuid()} and cannot start a trainer as uid {uid}"
            )
            return
        trainer = 0
        with self._lock:
            why = self.pool.why_cold([req["argv"]])
            if why is None:
                popens = self.pool.take(
                    [req["argv"]],
                    [req["env"]],
                    cwd=Path(req["cwd"]),
                    log_path=None,
                    fds=[*fds, conn.fileno()],
                    user=(uid, gid),
                )
                if popens is None:
                    why = "the standby died as it was taken"
                else:
                    st = procfs.read_stat(procfs.PROC, pid)
                    self.trainers[popens[0].pid] = (popens[0], pid, st.start_time if st is not None else -1)
                    self._taken = True
                    trainer = popens[0].pid
        if why is not None:
            self.answers["cold"] += 1
            self._reply(conn, f"cold {why}")
            return
        self.answers["warm"] += 1
        job = req["env"].get("SLURM_JOB_ID", "?")
        log.info("standby pid %d is now the trainer of task pid %d (Slurm job %s)", trainer, pid, job)

    @staticmethod
    def _reply(conn: socket.socket, line: str) -> None:
        try:
            conn.settimeout(REQUEST_TIMEOUT_S)
            conn.sendall(line.encode() + b"\n")
        except OSError as e:
            log.info("standby socket: task went away before its answer: %s", e)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "size": self.pool.size,
                "idle": len(self.pool.idle),
                "ready": sum(1 for s in self.pool.idle if s.ready()),
                "started": self.pool.started,
                "trainers": sorted(self.trainers),
                **self.answers,
            }

    def close(self, proc_root: Path = procfs.PROC) -> None:
        """Idle standbys exit; trainers started from them go on (their tasks hold them), as trainers do.

        Those whose task is gone already are killed now, without the cycle's grace: no later cycle would, and
        a stopped (hung) one would stay forever, holding its memory."""
        super().close()
        with self._lock:
            self.pool.close()
            for pid, (p, task_pid, task_start) in list(self.trainers.items()):
                if p.poll() is None and not task_alive(proc_root, task_pid, task_start):
                    log.warning("trainer pid %d: its task pid %d is gone and the service stops: killed", pid, task_pid)
                    kill_group(p)
