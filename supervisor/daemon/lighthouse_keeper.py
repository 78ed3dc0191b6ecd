"""The head daemon's Lighthouse: outlives a daemon restart, is re-adopted, and is restarted on its port when it dies.

The quorum lives in the Lighthouse, so restarting the daemon (systemd
Restart=always, KillMode=process: only the daemon's own process is signalled)
must not restart it. The daemon leaves it running when it stops and records
in the state dir which process it is (PID, start time, command line) and its
port. A new daemon adopts the recorded process if that PID is still the same
process (start time and command line match: a reused PID is not ours);
otherwise it starts a new one on the recorded port, which the trainers'
Managers were given and reconnect to.

An adopted Lighthouse is not our child: its exit is seen in /proc (the
process is gone or a zombie), and its exit code is unknown.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

from lamplighter.configs.schema import LighthouseConfig
from lamplighter.supervisor.daemon.discovery import parse_stat
from lamplighter.supervisor.daemon.state_store import write_json_durable
from lamplighter.supervisor.lighthouse import Lighthouse, lighthouse_argv

log = logging.getLogger(__name__)

RECORD = "lighthouse.json"


@dataclass(frozen=True)
class LighthouseRecord:
    pid: int
    start_time: int  # clock ticks after boot (/proc/PID/stat field 22): with pid, the process's identity
    port: int
    argv: list[str]
    started_at: float


def read_record(path: Path) -> LighthouseRecord | None:
    try:
        raw = json.loads(path.read_text())
        return LighthouseRecord(
            int(raw["pid"]),
            int(raw["start_time"]),
            int(raw["port"]),
            [str(a) for a in raw["argv"]],
            float(raw["started_at"]),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("lighthouse record %s unreadable (%s): starting a new Lighthouse", path, e)
        return None


def start_time_of(proc_root: Path, pid: int) -> int | None:
    """The process's start time, or None if it is gone or a zombie."""
    try:
        st = parse_stat((proc_root / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None
    return None if st.state in ("Z", "X") else st.start_time


def cmdline_of(proc_root: Path, pid: int) -> list[str] | None:
    try:
        raw = (proc_root / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


class KeptLighthouse:
    """One Lighthouse on one port, adopted or started by this daemon; see the module docstring."""

    def __init__(self, cfg: LighthouseConfig, state_dir: Path, log_path: Path, proc_root: Path = Path("/proc")) -> None:
        self.cfg = cfg
        self.record_path = state_dir / RECORD
        self.log_path = log_path
        self.proc_root = proc_root
        self.lighthouse: Lighthouse | None = None  # set when this daemon started it (its child)
        self.record: LighthouseRecord | None = None
        self.adopted = False

    @property
    def pid(self) -> int | None:
        return self.record.pid if self.record else None

    @property
    def address(self) -> str:
        port = self.record.port if self.record else self.cfg.port
        return f"http://{self.cfg.host}:{port}"

    def start(self, now: float) -> None:
        """Adopt the recorded Lighthouse if it still runs as recorded, else start one (on the recorded port)."""
        old = read_record(self.record_path)
        port = self.cfg.port or (old.port if old else 0)
        if old is not None and self._is_recorded(old):
            flags = self._flags(port)
            if old.port == port and old.argv[-len(flags) :] == flags:
                self.record, self.adopted = old, True
                log.info("adopted the running Lighthouse pid %d on %s", old.pid, self.address)
                return
            log.warning("Lighthouse pid %d runs with other settings than configured: replacing it", old.pid)
            os.kill(old.pid, signal.SIGKILL)  # ours: same PID, start time and command line as recorded
        self._start_new(now, port)

    def restart(self, now: float) -> None:
        """Start a new one on the same port (the old one has exited)."""
        assert self.record is not None
        self._start_new(now, self.record.port)

    def alive(self) -> bool:
        if self.record is None:
            return False
        lh = self.lighthouse
        if lh is not None and lh.popen is not None and lh.popen.pid == self.record.pid:
            return lh.popen.poll() is None  # our child: reap it, keep its exit code
        return self._is_recorded(self.record)

    def exit_code(self) -> int | None:
        lh = self.lighthouse
        if lh is not None and lh.popen is not None and self.record and lh.popen.pid == self.record.pid:
            return lh.popen.returncode
        return None  # adopted: not our child, its exit code went to its parent

    def kill(self) -> None:
        """Stop it for good (not done on daemon shutdown; for tests and operators)."""
        if self.lighthouse is not None and self.lighthouse.popen is not None:
            self.lighthouse.kill()
        elif self.record is not None and self._is_recorded(self.record):
            os.kill(self.record.pid, signal.SIGKILL)

    def _flags(self, port: int) -> list[str]:
        return lighthouse_argv(self.cfg, port, [])

    def _is_recorded(self, rec: LighthouseRecord) -> bool:
        return start_time_of(self.proc_root, rec.pid) == rec.start_time and cmdline_of(self.proc_root, rec.pid) == list(
            rec.argv
        )

    def _start_new(self, now: float, port: int) -> None:
        if self.lighthouse is not None and self.lighthouse.popen is not None:
            self.lighthouse.popen.poll()  # reap the dead one
        lh = Lighthouse(self.cfg.model_copy(update={"port": port}), self.log_path)
        pid = lh.start(now)
        assert lh.popen is not None
        argv = [str(a) for a in lh.popen.args]  # type: ignore[union-attr]
        start = start_time_of(self.proc_root, pid)
        self.lighthouse = lh
        self.adopted = False
        self.record = LighthouseRecord(pid, start if start is not None else -1, lh.port, argv, now)
        write_json_durable(self.record_path, asdict(self.record))
        log.info("started the Lighthouse pid %d on %s", pid, lh.address)
