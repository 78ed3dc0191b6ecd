"""Real parts for the trainer's integration tests: a torchft Lighthouse and trainer processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from realparts import wait_for

from lamplighter.configs.schema import JobConfig
from lamplighter.trainer.adapter import render_command, trainer_env

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Lighthouse:
    addr: str
    proc: subprocess.Popen[bytes]


@pytest.fixture
def lighthouse(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Lighthouse]:
    """A Lighthouse with the schema-default timings; min_replicas from indirect parametrization (default 1)."""
    min_replicas = str(getattr(request, "param", 1))
    port = free_port()
    log = (tmp_path / "lighthouse.log").open("wb")
    proc = subprocess.Popen(
        [
            str(VENV_BIN / "torchft_lighthouse"),
            "--bind",
            f"[::]:{port}",
            "--min_replicas",
            min_replicas,
            "--quorum_tick_ms",
            "20",
            "--join_timeout_ms",
            "1000",
            "--heartbeat_timeout_ms",
            "500",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def up() -> bool:
        assert proc.poll() is None, f"lighthouse exited with {proc.returncode}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False

    try:
        wait_for(up, 30, "the Lighthouse to listen")
        yield Lighthouse(f"http://127.0.0.1:{port}", proc)
    finally:
        proc.kill()
        proc.wait()
        log.close()


@dataclass
class Trainers:
    """Starts reference-trainer processes for one job, as the supervisor would."""

    job: JobConfig
    run_dir: Path
    lighthouse: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def config_path(self) -> Path:
        p = self.run_dir / "job.json"
        if not p.exists():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            p.write_text(self.job.model_dump_json())
        return p

    def start(self, replica_id: int, attempt: int = 0) -> subprocess.Popen[bytes]:
        cfg = str(self.config_path())
        argv = render_command(
            self.job, replica_id=replica_id, lighthouse=self.lighthouse, config_path=cfg, python=sys.executable
        )
        env = dict(os.environ)
        env.update(
            trainer_env(
                self.job,
                replica_id=replica_id,
                attempt=attempt,
                lighthouse=self.lighthouse,
                config_path=cfg,
                run_dir=str(self.run_dir),
            )
        )
        env.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"})
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        out = (logs / f"{replica_id}.{attempt}.log").open("wb")
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        self.procs.append(proc)
        return proc

    def log_text(self, replica_id: int, attempt: int = 0) -> str:
        return (self.run_dir / "logs" / f"{replica_id}.{attempt}.log").read_text()

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


@pytest.fixture
def make_trainers(tmp_path: Path, lighthouse: Lighthouse) -> Iterator[Callable[[JobConfig], Trainers]]:
    made: list[Trainers] = []

    def make(job: JobConfig) -> Trainers:
        t = Trainers(job=job, run_dir=tmp_path / "run", lighthouse=lighthouse.addr)
        made.append(t)
        return t

    try:
        yield make
    finally:
        for t in made:
            t.stop_all()
