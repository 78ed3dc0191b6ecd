"""Starting and killing a group's whole process tree, with real processes, and nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from realparts import wait_for

from lamplighter.system.ports import free_port
from lamplighter.system.process_tree import GroupProcesses

# A parent that starts a child in the same process group and one that escapes to its own session.
SPAWNER = """
import subprocess, sys, time, os
a = subprocess.Popen(["sleep", "300"])
b = subprocess.Popen(["sleep", "301"], start_new_session=True)
open(sys.argv[1], "w").write(f"{a.pid} {b.pid}")
time.sleep(300)
"""


def test_kill_takes_the_whole_tree_and_spares_a_stranger(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    stranger = subprocess.Popen(["sleep", "302"], start_new_session=True)
    env = dict(os.environ)
    gp = GroupProcesses.start(
        group=3,
        attempt=1,
        argv=[[sys.executable, "-c", SPAWNER, str(pidfile)], ["sleep", "303"]],
        envs=[env, env],
        log_path=tmp_path / "logs" / "3.1.log",
        started_at=time.time(),
    )
    try:
        wait_for(
            lambda: pidfile.exists() and pidfile.read_text().count(" ") == 1, 20, "the grandchild to write its pid"
        )
        a, b = (int(x) for x in pidfile.read_text().split())
        assert [t.rank for t in gp.trainers()] == [0, 1] and gp.running()
        killed = gp.kill()
        assert {gp.popens[0].pid, gp.popens[1].pid, a, b} <= set(killed)
        assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in (a, b))
        assert [p.returncode for p in gp.popens] == [-9, -9]
        assert not gp.running()
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_stop_signal_freezes_the_group(tmp_path: Path) -> None:
    gp = GroupProcesses.start(
        group=0,
        attempt=0,
        argv=[["sleep", "300"]],
        envs=[dict(os.environ)],
        log_path=tmp_path / "0.log",
        started_at=time.time(),
    )
    try:
        gp.signal(signal.SIGSTOP)
        wait_for(lambda: psutil.Process(gp.popens[0].pid).status() == psutil.STATUS_STOPPED, 20, "the group to stop")
    finally:
        gp.kill()
    assert gp.popens[0].returncode == -9  # SIGKILL works on a stopped process


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
