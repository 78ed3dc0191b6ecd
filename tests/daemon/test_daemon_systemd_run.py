"""`lamplighter supervise` as systemd runs it: READY and WATCHDOG over a real datagram socket, metrics and
the status socket served, and a clean SIGTERM (STOPPING=1, exit 0) that leaves the trainers running.

The daemon is a real subprocess (compute role, simulated GPUs, no Slurm needed: it acts only on trainers of
Slurm jobs, and there are none); the test plays systemd's part by binding NOTIFY_SOCKET itself.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from realparts import NotifySocket, wait_for

from lamplighter.gpusim.build import sim_env
from lamplighter.gpusim.state import StateDir
from lamplighter.rundir.contract import ENV_ATTEMPT, ENV_JOB, ENV_REPLICA_ID, ENV_RUN_DIR
from lamplighter.supervisor.status_socket import StatusError, read_status

pytestmark = pytest.mark.integration
GPUS = 2


@pytest.fixture
def notify() -> Iterator[NotifySocket]:
    s = NotifySocket()
    yield s
    s.close()


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        p.kill()
        p.wait(timeout=10)


def start_daemon(
    tmp_path: Path, env: dict[str, str], metrics: dict[str, Any], gpus: bool, health: dict[str, Any]
) -> tuple[subprocess.Popen[bytes], Path]:
    """`lamplighter supervise` of node "node-under-test", its state and status socket under tmp_path, polling
    every 0.2 s: the process and its log."""
    cfg = {
        "role": "compute",
        "node_name": "node-under-test",
        "state_dir": str(tmp_path / "state"),
        "status_socket": str(tmp_path / "run" / "status.sock"),
        "metrics": metrics,
        "gpus": gpus,
        "health": {"poll_interval_s": 0.2, **health},
    }
    cfg_path = tmp_path / "node.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "lamplighter", "supervise", "--config", str(cfg_path)],
            stdout=out,
            stderr=out,
            env=env,
        )
    return daemon, log


def test_ready_watchdog_metrics_status_and_sigterm_leaves_trainer(
    gpusim_root: Path, tmp_path: Path, notify: NotifySocket
) -> None:
    sd = StateDir(tmp_path / "gpus")
    sd.init(GPUS)
    sock_path = tmp_path / "run" / "status.sock"
    env = sim_env(gpusim_root, sd.root)
    env.update({"NOTIFY_SOCKET": notify.name, "WATCHDOG_USEC": "500000"})
    env.pop("WATCHDOG_PID", None)
    trainer_env = dict(os.environ)
    run_dir = tmp_path / "run-job"
    trainer_env.update({ENV_JOB: "job-a", ENV_REPLICA_ID: "0", ENV_RUN_DIR: str(run_dir), ENV_ATTEMPT: "0"})
    trainer = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"], env=trainer_env, start_new_session=True
    )
    metrics = {"enabled": True, "host": "127.0.0.1", "port": 0}
    daemon, log = start_daemon(tmp_path, env, metrics=metrics, gpus=True, health={"probe_deadline_s": 1.0})
    try:

        def alive() -> None:
            assert daemon.poll() is None, f"daemon exited {daemon.returncode}: {log.read_text()[-3000:]}"

        def ready() -> bool:
            alive()
            return notify.count("READY=1") > 0

        wait_for(ready, 60, "READY=1")
        first = notify.count("WATCHDOG=1")
        wait_for(lambda: alive() or notify.count("WATCHDOG=1") >= first + 3, 30, "repeated WATCHDOG=1")

        def status() -> dict[str, Any]:
            alive()
            try:
                return read_status(sock_path, timeout=5)
            except StatusError:
                return {}

        st = wait_for(
            lambda: (
                (s := status()) and len(s.get("gpus", [])) == GPUS and all(g["status"] == "ok" for g in s["gpus"]) and s
            ),
            60,
            "both GPUs healthy in the status",
        )
        assert st["pid"] == daemon.pid and st["role"] == "compute" and st["node"] == "node-under-test"
        assert st["cycles"] >= 1 and st["pending"] == []
        port = st["metrics_port"]
        assert isinstance(port, int) and port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        for gpu in range(GPUS):
            assert f'lamplighter_gpu_health{{gpu="{gpu}",status="ok"}} 1.0' in text, text[:2000]
        # deploy/README: no daemon listens on the network but for its metrics (the status socket is a Unix
        # one): not the daemon, its GPU workers, nor its zygote of user readers.
        assert listening(daemon.pid) == {("tcp", "127.0.0.1", port)}

        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0, log.read_text()[-3000:]
        wait_for(lambda: notify.count("STOPPING=1") > 0, 10, "STOPPING=1")
        assert trainer.poll() is None, "the trainer died with the daemon"
        assert not sock_path.exists() or not _answers(sock_path)
    finally:
        _stop(daemon)
        _stop(trainer)


def listening(pid: int) -> set[tuple[str, str, int]]:
    """The TCP sockets listening and the UDP sockets bound in the process tree of `pid`."""
    root = psutil.Process(pid)
    out = set()
    for p in [root, *root.children(recursive=True)]:
        for c in p.net_connections(kind="inet"):
            kind = "tcp" if c.type == socket.SOCK_STREAM else "udp"
            if c.laddr and (kind == "udp" or c.status == psutil.CONN_LISTEN):
                out.add((kind, c.laddr.ip, c.laddr.port))
    return out


def _answers(path: Path) -> bool:
    try:
        read_status(path, timeout=1)
        return True
    except StatusError:
        return False


def test_a_daemon_whose_user_readers_zygote_died_ends_for_systemd_to_restart_it(
    tmp_path: Path, notify: NotifySocket
) -> None:
    """With its zygote gone no job's files can be read as its user, and a fresh zygote cannot be forked from a
    process with threads: the daemon ends non-zero, saying why, and Restart=always brings a fresh one."""
    env = {**os.environ, "NOTIFY_SOCKET": notify.name}
    daemon, log = start_daemon(tmp_path, env, metrics={"enabled": False}, gpus=False, health={})
    try:
        wait_for(lambda: daemon.poll() is None and notify.count("READY=1") > 0, 60, "READY=1")
        main = psutil.Process(daemon.pid)
        [zygote] = [c for c in main.children() if c.cmdline() == main.cmdline()]  # forked, not exec'd
        zygote.kill()
        assert daemon.wait(timeout=30) == 1
        said = log.read_text()
        assert f"the user-reads zygote (pid {zygote.pid}) ended (killed by signal 9)" in said, said[-2000:]
        assert "systemd starts a fresh daemon" in said
    finally:
        _stop(daemon)
