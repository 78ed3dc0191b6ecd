"""A group's kill reaches the worker below torchrun even once torchrun itself is dead (test_process_tree.py:
while it lives).

torchrun starts its workers in sessions of their own. When the agent dies first (OOM-killed, SIGKILLed), its
worker is an orphan that trains on as a ghost replica of the group: the kill finds it by the environment the
launcher gave the attempt, which the worker inherited.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil

from lamplighter.rundir.contract import ENV_ATTEMPT, ENV_REPLICA_ID, ENV_RUN_DIR
from lamplighter.system.process_tree import GroupProcesses

# An agent that starts a worker in a new session (as torchrun does) and prints the worker's pid.
AGENT = """
import subprocess, sys, time
w = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
print(w.pid, flush=True)
time.sleep(120)
"""


def start(tmp_path: Path, attempt: int) -> tuple[GroupProcesses, psutil.Process]:
    env = {**os.environ, ENV_RUN_DIR: str(tmp_path), ENV_REPLICA_ID: "1", ENV_ATTEMPT: str(attempt)}
    log = tmp_path / f"g1.{attempt}.log"
    gp = GroupProcesses.start(
        group=1, attempt=attempt, argv=[[sys.executable, "-c", AGENT]], envs=[env], log_path=log, started_at=0.0
    )
    deadline = time.monotonic() + 30
    while not log.read_text().strip():
        assert time.monotonic() < deadline, "the agent printed no worker pid"
        time.sleep(0.05)
    return gp, psutil.Process(int(log.read_text().split()[0]))


def gone(p: psutil.Process) -> bool:
    try:
        psutil.wait_procs([p], timeout=10)
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_kill_reaches_the_orphan_of_a_dead_launcher(tmp_path: Path) -> None:
    gp, worker = start(tmp_path, attempt=0)
    other, other_worker = start(tmp_path, attempt=1)  # the group's next attempt: never this kill's
    try:
        os.kill(gp.popens[0].pid, signal.SIGKILL)  # the agent dies first
        gp.popens[0].wait(timeout=10)
        assert worker.is_running() and worker.ppid() != gp.popens[0].pid  # an orphan, training on
        gp.kill()
        assert gone(worker)
        assert other_worker.is_running() and other_worker.status() != psutil.STATUS_ZOMBIE
    finally:
        for p in (worker, other_worker):
            try:
                p.kill()
            except psutil.Error:
                pass
        other.kill()
