"""The node daemon's kill reaches every process below the trainer it watches, whatever their sessions.

torchrun starts its workers in sessions of their own: a kill of the agent alone left the worker training."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from lamplighter.rundir.actions import ActionLog
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.node_policy import NodeAction
from lamplighter.supervisor.state_store import DaemonState
from lamplighter.system import procfs

# An agent that starts a worker in a new session (as torchrun does) and prints the worker's pid.
AGENT = """
import subprocess, sys, time
w = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
print(w.pid, flush=True)
time.sleep(120)
"""


def test_a_kill_reaches_the_worker_in_its_own_session(tmp_path: Path) -> None:
    agent = subprocess.Popen([sys.executable, "-c", AGENT], stdout=subprocess.PIPE, text=True)
    assert agent.stdout is not None
    worker = psutil.Process(int(agent.stdout.readline()))
    try:
        assert worker.ppid() == agent.pid and procfs.read_stat(Path("/proc"), worker.pid) is not None
        st = procfs.read_stat(Path("/proc"), agent.pid)
        assert st is not None
        ex = Executor(DaemonState.load(tmp_path / "state"), None, None, ActionLog("n1", lambda line: None))  # type: ignore[arg-type]
        [res] = ex.execute(time.time(), [NodeAction("kill_local", "7", "hung", pids=((agent.pid, st.start_time),))])
        assert agent.wait(timeout=10) == -9
        # Killed, not merely orphaned: waiting on it returns (its parent is gone, so it is init's to reap).
        psutil.wait_procs([worker], timeout=10)
        assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE, res
    finally:
        for p in (agent, worker):
            try:
                p.kill()
            except (psutil.Error, ProcessLookupError):
                pass
