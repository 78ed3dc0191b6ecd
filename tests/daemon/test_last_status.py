"""The status socket answers whole cycles only (a CI run read a trainer whose job watch did not exist yet)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from lamplighter.commands.supervise import cycle, status_document
from lamplighter.supervisor.last_status import LastStatus
from lamplighter.supervisor.state_store import DaemonState
from lamplighter.supervisor.status_socket import StatusServer, read_status


class HalfwayLoop:
    """A loop whose cycle adopts a trainer, then (after `resume`) makes its job's watch: two steps, like ComputeLoop."""

    def __init__(self) -> None:
        self.trainers: list[str] = []
        self.jobs: list[str] = []
        self.halfway = threading.Event()
        self.resume = threading.Event()

    def cycle(self) -> None:
        self.trainers = ["pid 7 of job 3"]
        self.halfway.set()
        assert self.resume.wait(30)
        self.jobs = ["job 3"]

    def status(self) -> dict[str, Any]:
        return {"cycles": len(self.jobs), "trainers": list(self.trainers), "jobs": list(self.jobs)}


def test_a_reader_during_a_cycle_sees_the_last_whole_one(tmp_path: Path) -> None:
    loop = HalfwayLoop()
    last = LastStatus(loop.status)
    state = DaemonState.load(tmp_path / "state")
    server = StatusServer(tmp_path / "s.sock", status_document("n1", state, last, None)).start()
    try:
        cycling = threading.Thread(target=cycle, args=("n1", loop, last, None, None))
        cycling.start()
        assert loop.halfway.wait(30)
        # The loop itself is half-way now: a trainer without its job.
        assert loop.status()["trainers"] and not loop.status()["jobs"]
        during = read_status(tmp_path / "s.sock", timeout=10)
        loop.resume.set()
        cycling.join(30)
        assert not cycling.is_alive()
        after = read_status(tmp_path / "s.sock", timeout=10)
    finally:
        loop.resume.set()
        server.close()
        state.close()
    assert (during["trainers"], during["jobs"]) == ([], [])
    assert (after["trainers"], after["jobs"]) == (["pid 7 of job 3"], ["job 3"])
    assert after["node"] == "n1" and after["restarts"] == {} and after["pending"] == []
    # The cycle's own duration, measured around the loop's work (here held half-way by the test: not zero).
    assert "cycle_s" not in during and after["cycle_s"] > 0
