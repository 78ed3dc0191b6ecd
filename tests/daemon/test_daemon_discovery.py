from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lamplighter.rundir.contract import ENV_JOB, ENV_REPLICA_ID
from lamplighter.supervisor.discovery import find_trainers, read_process, roots
from lamplighter.system.procfs import parse_stat, same_process


def _stat(pid: int, comm: str, state: str, ppid: int, start: int) -> str:
    # 52 fields; field 22 is the start time.
    fields = [str(pid), f"({comm})", state, str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 30
    return " ".join(fields) + "\n"


def _fake(
    root: Path, pid: int, env: dict[str, str], comm: str = "python", state: str = "S", ppid: int = 1, start: int = 1000
) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(_stat(pid, comm, state, ppid, start))
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))


def test_fake_proc_tree(tmp_path: Path) -> None:
    slurm = {"SLURM_JOB_ID": "812", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1"}
    _fake(
        tmp_path, 10, {ENV_JOB: "llama", ENV_REPLICA_ID: "2", **slurm, "PATH": "/bin"}, comm="weird ) (name", start=77
    )
    _fake(tmp_path, 11, {ENV_JOB: "llama", ENV_REPLICA_ID: "2", **slurm}, ppid=10, start=78)  # a dataloader worker
    _fake(tmp_path, 12, {"PATH": "/bin"}, comm="lamplighter-trainer")  # the name means nothing
    _fake(tmp_path, 13, {ENV_JOB: "other", ENV_REPLICA_ID: "x"})  # bare metal: no Slurm ids
    _fake(tmp_path, 14, {ENV_JOB: "llama"}, state="Z")
    _fake(tmp_path, 15, {ENV_JOB: ""})
    (tmp_path / "16").mkdir()  # exited between listing and reading
    (tmp_path / "self").mkdir()
    found = find_trainers(tmp_path)
    assert [t.pid for t in found] == [10, 11, 13]
    t = found[0]
    assert (t.job_name, t.replica_id, t.job_id, t.step, t.procid, t.start_time, t.ppid, t.state) == (
        "llama",
        2,
        "812",
        "0",
        1,
        77,
        1,
        "S",
    )
    assert (found[2].job_id, found[2].replica_id, found[2].procid) == (None, None, None)
    assert [t.pid for t in roots(found)] == [10, 13]
    assert [t.pid for t in find_trainers(tmp_path, job_names=["other"])] == [13]
    assert same_process(tmp_path, t.pid, t.start_time)
    (tmp_path / "10" / "stat").write_text(_stat(10, "python", "S", 1, 999))  # pid reused
    assert not same_process(tmp_path, t.pid, t.start_time)


def test_parse_stat_with_parentheses_in_name() -> None:
    s = parse_stat(_stat(5, "a) b (c", "D", 4, 123))
    assert (s.ppid, s.state, s.start_time) == (4, "D", 123)


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)


def _spawn(procs: list[subprocess.Popen[bytes]], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # A child that waits on stdin: it lives until the test ends, whatever the machine's speed.
    p = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/bin"), **env},
    )
    procs.append(p)
    return p


def test_real_processes(children: list[subprocess.Popen[bytes]]) -> None:
    job = f"discovery-test-{os.getpid()}"
    a = _spawn(children, {ENV_JOB: job, ENV_REPLICA_ID: "0", "SLURM_JOB_ID": "55", "SLURM_STEP_ID": "batch"})
    b = _spawn(children, {ENV_JOB: job, ENV_REPLICA_ID: "1"})
    decoy = _spawn(children, {"LAMPLIGHTER_JOB_NOT": job})
    found = {t.pid: t for t in find_trainers(Path("/proc"), job_names=[job])}
    assert set(found) == {a.pid, b.pid}
    assert decoy.pid not in found
    assert (found[a.pid].job_id, found[a.pid].step, found[a.pid].replica_id) == ("55", "batch", 0)
    assert found[b.pid].ppid == os.getpid()
    assert same_process(Path("/proc"), a.pid, found[a.pid].start_time)
    assert a.stdin is not None
    a.stdin.close()
    a.wait(timeout=30)
    deadline = time.monotonic() + 30
    while same_process(Path("/proc"), a.pid, found[a.pid].start_time) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not same_process(Path("/proc"), a.pid, found[a.pid].start_time)
    assert read_process(Path("/proc"), a.pid) is None
