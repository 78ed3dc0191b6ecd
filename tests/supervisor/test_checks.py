"""Checks on real short-lived children (exits), a fake /proc tree (D state, memory) and fake heartbeats."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from static_table import StaticTable

from lamplighter.policy.observations import LighthouseDown, Observation, ProcessExited
from lamplighter.supervisor.checks.dstate import DStateCheck
from lamplighter.supervisor.checks.exit_watcher import ExitWatcher
from lamplighter.supervisor.checks.memory import MemoryCheck, MemoryCheckError
from lamplighter.system.procfs import parse_stat
from lamplighter.system.trainer_proc import TrainerProc


def stat_line(pid: int, comm: str, state: str, ppid: int, rss_pages: int, starttime: int = 100) -> str:
    # Fields after comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice threads itrealvalue starttime vsize rss ...
    rest = [state, ppid, ppid, ppid, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 1, 0, starttime, 0, rss_pages, 0]
    return f"{pid} ({comm}) " + " ".join(str(x) for x in rest) + "\n"


def fake_proc(root: Path, procs: list[tuple[int, str, int, int]], mem_kb: int = 1_000_000) -> None:
    """procs: (pid, state, ppid, rss_pages)."""
    (root / "meminfo").write_text(f"MemTotal:       {mem_kb} kB\nMemFree:  1 kB\n")
    for pid, state, ppid, rss in procs:
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "stat").write_text(stat_line(pid, "py (x) y", state, ppid, rss))


def test_parse_stat_with_odd_comm() -> None:
    st = parse_stat(stat_line(42, "a) (b", "D", 7, 123, starttime=999))
    assert (st.pid, st.comm, st.state, st.ppid, st.start_time, st.rss_pages) == (42, "a) (b", "D", 7, 999, 123)


def test_parse_stat_of_real_process() -> None:
    import os

    st = parse_stat(Path(f"/proc/{os.getpid()}/stat").read_text())
    assert st.pid == os.getpid() and st.state in "RS" and st.rss_pages > 0


TABLE = StaticTable([TrainerProc(group=1, rank=0, attempt=2, pid=100, started_at=0.0)])


def test_dstate_fires_only_after_limit_and_on_descendants(tmp_path: Path) -> None:
    fake_proc(tmp_path, [(100, "S", 1, 10), (101, "D", 100, 10), (200, "D", 1, 10)])
    check = DStateCheck(TABLE, limit_s=5.0, proc_root=tmp_path)
    assert check.observe(10.0) == []
    assert check.observe(14.9) == []
    obs = check.observe(15.0)
    assert [(o.group, o.attempt, o.pid) for o in obs] == [(1, 2, 101)]  # 200 is not ours
    assert "uninterruptible" in obs[0].reason
    # Leaving D resets the clock.
    fake_proc(tmp_path, [(100, "S", 1, 10), (101, "S", 100, 10)])
    assert check.observe(16.0) == []
    fake_proc(tmp_path, [(100, "S", 1, 10), (101, "D", 100, 10)])
    assert check.observe(17.0) == []


def test_memory_sums_the_tree(tmp_path: Path) -> None:
    # 1_000_000 kB total; pages of 1 kB for easy numbers.
    fake_proc(tmp_path, [(100, "S", 1, 500_000), (101, "S", 100, 460_000), (200, "S", 1, 900_000)])
    obs = MemoryCheck(TABLE, max_percent=95.0, proc_root=tmp_path, page_size=1024).observe(0.0)
    assert [(o.pid, round(o.percent)) for o in obs] == [(100, 96)]
    assert MemoryCheck(TABLE, max_percent=97.0, proc_root=tmp_path, page_size=1024).observe(0.0) == []


def test_memory_check_that_cannot_run_raises(tmp_path: Path) -> None:
    with pytest.raises(MemoryCheckError, match="MemTotal"):
        MemoryCheck(TABLE, max_percent=95.0, proc_root=tmp_path).observe(0.0)


def _wait_for(w: ExitWatcher, n: int) -> list[Observation]:
    got: list[Observation] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        w.wait(1.0)
        got += w.observe(time.time())
    return got


def test_exit_watcher_reports_code_signal_and_keeps_zombie_until_reaped() -> None:
    w = ExitWatcher(time.time)
    try:
        a = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(75)"])
        b = subprocess.Popen(["sleep", "60"])
        lh = subprocess.Popen(["sleep", "60"])
        w.watch_trainer(TrainerProc(group=0, rank=0, attempt=3, pid=a.pid, started_at=0.0))
        w.watch_trainer(TrainerProc(group=1, rank=0, attempt=0, pid=b.pid, started_at=0.0))
        w.watch_lighthouse(lh.pid)
        got = _wait_for(w, 1)
        assert got == [ProcessExited(group=0, rank=0, attempt=3, pid=a.pid, returncode=75, t=got[0].t)]
        # Not reaped by the watcher: the zombie still holds the PID.
        assert Path(f"/proc/{a.pid}/stat").read_text().split(") ")[1][0] == "Z"
        assert a.wait() == 75
        b.kill()
        lh.kill()
        got = _wait_for(w, 2)
        assert {(type(o).__name__, o.returncode) for o in got} == {("ProcessExited", -9), ("LighthouseDown", -9)}
        assert any(isinstance(o, LighthouseDown) and "SIGKILL" in o.reason for o in got)
        b.wait()
        lh.wait()
    finally:
        w.close()


def test_exit_watcher_calls_its_on_exit_from_its_thread_the_moment_a_process_ends() -> None:
    """The daemon's loop is woken by it: the exit is acted on now, not at the next cycle."""
    woken = threading.Event()
    w = ExitWatcher(time.time, on_exit=woken.set)
    try:
        p = subprocess.Popen(["sleep", "60"])
        w.watch_trainer(TrainerProc(group=0, rank=0, attempt=0, pid=p.pid, started_at=0.0))
        assert not woken.is_set()
        p.kill()
        assert woken.wait(30)
        assert [type(o).__name__ for o in w.observe(time.time())] == ["ProcessExited"]
        p.wait()
    finally:
        w.close()
