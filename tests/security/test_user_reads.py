"""What a job's user controls (job.json, lighthouse.json, its Lighthouse's page) is parsed by a process of that
user with no capability, never by the root daemon; a helper that fails, hangs or lies is a failed read."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import Tenant
from realparts import wait_for

from lamplighter.configs.job_file import job_file_json
from lamplighter.configs.schema import HealthConfig, JobConfig
from lamplighter.lighthouse.status import LighthouseStatusError, parse_status
from lamplighter.supervisor.user_reads import pool
from lamplighter.supervisor.user_reads.pool import BACKOFF_S, MAX_STUCK, UserReads

REC = Path(__file__).parents[1] / "lighthouse_status" / "recorded"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def reads() -> Iterator[tuple[UserReads, Clock]]:
    clock = Clock()
    r = UserReads.start(allow_threads=True)  # pytest's own threads: the zygote runs no code of theirs
    r._clock = clock
    try:
        yield r, clock
    finally:
        r.close()


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def job_json(tenant: Tenant, name: str, hang: float = 17.0) -> Path:
    job = JobConfig(name=name, run_dir=str(tenant.home / name), health=HealthConfig(hang_timeout_s=hang))
    tenant.folder(name)
    return tenant.write(f"{name}/job.json", job_file_json(job), mode=0o600)


class PageServer:
    """Serves one recorded torchft /status page on 127.0.0.1, one connection at a time."""

    def __init__(self, page: str) -> None:
        self.body = (REC / page).read_bytes()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + self.body)

    def close(self) -> None:
        self.sock.close()


def test_a_jobs_files_and_page_are_parsed_as_its_user_with_no_capability(
    tenant: Tenant, reads: tuple[UserReads, Clock]
) -> None:
    r, _ = reads
    held = os.open("/etc/shadow", os.O_RDONLY)  # a root-only file the daemon holds open: no helper inherits it
    try:
        path = job_json(tenant, "ur-run", hang=17.0)
        settings = r.settings(str(path), tenant.uid)  # 0600: only its user (and root) can read it
        assert settings.error is None and settings.health.hang_timeout_s == 17.0 and settings.owner == tenant.uid
        assert settings.run_dir == str(tenant.home / "ur-run") and settings.source == str(path)
        server = PageServer("status_two.html")
        try:
            tenant.write("ur-run/lighthouse.json", f'{{"address": "{server.address}"}}')
            assert r.address(tenant.home / "ur-run", tenant.uid) == (server.address, None)
            status = r.status(tenant.uid, server.address, 2.0)
        finally:
            server.close()
        assert status == parse_status((REC / "status_two.html").read_text())
        pids = r.helper_pids()
        assert set(pids) == {(tenant.uid, "files"), (tenant.uid, "lighthouse")}
        for pid in pids.values():
            st = proc_status(pid)
            assert st["Uid"].split() == [str(tenant.uid)] * 4 and st["Gid"].split() == [str(tenant.gid)] * 4
            assert st["Groups"] == "" and st["NoNewPrivs"] == "1"
            assert int(st["CapEff"], 16) == int(st["CapPrm"], 16) == int(st["CapAmb"], 16) == 0
            fds = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
            assert fds - {0, 1, 2} and len(fds - {0, 1, 2}) == 1 and held not in fds - {0, 1, 2}  # its socket only
            assert all(os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/null" for fd in (0, 1, 2))
    finally:
        os.close(held)


def test_hostile_files_get_the_fallback_with_the_reason_and_the_helper_serves_on(
    tenant: Tenant, reads: tuple[UserReads, Clock], tmp_path: Path
) -> None:
    r, _ = reads
    good = job_json(tenant, "ur-hostile")
    run = good.parent
    hostile = {
        "garbage.json": ("[", "not a valid job config"),
        "version.json": ('{"format_version": 99, "name": "x"}', "99"),
        "unknown.json": ('{"format_version": 1, "name": "x", "nme": 1}', "a key this lamplighter does not know"),
        "big.json": ("{" + " " * (2 << 20) + "}", "bytes"),
    }
    for name, (text, why) in hostile.items():
        s = r.settings(str(tenant.write(f"ur-hostile/{name}", text)), tenant.uid)
        assert s.fallback and s.hangs == "report" and why in str(s.error), (name, s.error)
    os.mkfifo(run / "fifo.json")
    os.chown(run / "fifo.json", tenant.uid, tenant.gid)
    (run / "shadow.json").symlink_to("/etc/shadow")
    for name, why in [("fifo.json", "not a regular file"), ("shadow.json", "symbolic link")]:
        s = r.settings(str(run / name), tenant.uid)
        assert s.fallback and why in str(s.error), (name, s.error)
    # The user's own file behind a folder only root may search: root (CAP_DAC_READ_SEARCH) read it, the user cannot.
    shut = tmp_path / "root-only"
    shut.mkdir(mode=0o700)
    (shut / "job.json").write_text(good.read_text())
    os.chown(shut / "job.json", tenant.uid, tenant.gid)
    s = r.settings(str(shut / "job.json"), tenant.uid)
    assert s.fallback and "Permission denied" in str(s.error), s.error
    (run / "lighthouse.json").write_text('{"address": "file:///etc/shadow"}')
    os.chown(run / "lighthouse.json", tenant.uid, tenant.gid)
    assert r.address(run, tenant.uid) == (None, f"{run}/lighthouse.json: its address is not an http(s) URL")
    pid = r.helper_pids()[(tenant.uid, "files")]
    assert r.settings(str(good), tenant.uid).error is None  # one helper served it all, alive
    assert r.helper_pids()[(tenant.uid, "files")] == pid and r.spawned == 1


def test_a_hung_helper_is_a_failed_read_then_a_fresh_one_after_the_back_off(
    tenant: Tenant, reads: tuple[UserReads, Clock]
) -> None:
    r, clock = reads
    path = job_json(tenant, "ur-hung")
    assert r.settings(str(path), tenant.uid).error is None
    pid = r.helper_pids()[(tenant.uid, "files")]
    r.files_timeout_s = 0.3  # only the stopped helper's read waits it out
    os.kill(pid, signal.SIGSTOP)  # as a read stuck on a hung file system
    s = r.settings(str(path), tenant.uid)
    assert s.fallback and s.retryable and f"pid {pid}" in str(s.error) and "no answer within" in str(s.error)
    assert (tenant.uid, "files") not in r.helper_pids()
    s = r.settings(str(path), tenant.uid)  # within the back-off: no new helper, the reason again
    assert s.fallback and f"pid {pid}" in str(s.error) and r.spawned == 1
    clock.now += BACKOFF_S
    assert r.settings(str(path), tenant.uid).error is None
    assert r.helper_pids()[(tenant.uid, "files")] != pid and r.spawned == 2
    with pytest.raises(LighthouseStatusError, match="Connection refused"):  # the other kind has its own helper
        r.status(tenant.uid, "http://127.0.0.1:1", 0.5)


def test_helpers_that_a_kill_does_not_end_stop_new_ones_at_max_stuck(
    tenant: Tenant, reads: tuple[UserReads, Clock], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read stuck in the kernel (a hung NFS) is not ended by SIGKILL until the file system answers. Stand-in:
    a stopped helper whose kill is not delivered. Past MAX_STUCK such helpers no new one is forked."""
    r, clock = reads
    path = job_json(tenant, "ur-stuck")
    r.files_timeout_s = 0.3
    monkeypatch.setattr(pool.signal, "pidfd_send_signal", lambda fd, sig: None)  # the kill "waits in the kernel"
    stuck = []
    try:
        for _ in range(MAX_STUCK):
            assert r.settings(str(path), tenant.uid).error is None
            stuck.append(r.helper_pids()[(tenant.uid, "files")])
            os.kill(stuck[-1], signal.SIGSTOP)
            assert r.settings(str(path), tenant.uid).fallback
            clock.now += BACKOFF_S
        s = r.settings(str(path), tenant.uid)
        assert s.fallback and "have not ended since they were killed" in str(s.error), s.error
        assert all(str(pid) in str(s.error) for pid in stuck) and r.spawned == MAX_STUCK
    finally:
        for pid in stuck:
            os.kill(pid, signal.SIGKILL)
    for pid in stuck:  # the file system answered: the stuck readers end, and a fresh one serves
        wait_for(
            lambda p=pid: not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE,
            10,
            f"{pid} ended",
        )
    clock.now += BACKOFF_S
    assert r.settings(str(path), tenant.uid).error is None and r.spawned == MAX_STUCK + 1


def test_the_helpers_of_a_user_gone_from_the_node_end(tenant: Tenant, reads: tuple[UserReads, Clock]) -> None:
    r, _ = reads
    assert r.settings(str(job_json(tenant, "ur-gone")), tenant.uid).error is None
    pid = r.helper_pids()[(tenant.uid, "files")]
    pidfd = os.pidfd_open(pid)
    try:
        r.keep({0})
        assert r.helper_pids() == {}
        assert select_readable(pidfd, 10.0), "the helper did not end once its socket closed"
    finally:
        os.close(pidfd)


def select_readable(fd: int, timeout: float) -> bool:
    import select

    return bool(select.select([fd], [], [], timeout)[0])  # a pidfd turns readable when its process ends


def test_with_the_zygote_gone_a_read_fails_at_once_with_the_reason(tenant: Tenant) -> None:
    r = UserReads.start(allow_threads=True)
    try:
        os.kill(r._zygote.pid, signal.SIGKILL)
        os.waitpid(r._zygote.pid, 0)
        s = r.settings(str(job_json(tenant, "ur-zygote")), tenant.uid)
        assert s.fallback and "zygote" in str(s.error), s.error
    finally:
        r._zygote._ctl.close()


def test_a_root_jobs_reader_is_uid_0_with_no_capability(reads: tuple[UserReads, Clock], tmp_path: Path) -> None:
    r, _ = reads
    path = tmp_path / "job.json"
    path.write_text(job_file_json(JobConfig(name="ur-root")))
    assert r.settings(str(path), 0).error is None
    st = proc_status(r.helper_pids()[(0, "files")])
    assert st["Uid"].split() == ["0"] * 4 and st["Groups"] == ""
    assert int(st["CapEff"], 16) == int(st["CapPrm"], 16) == int(st["CapInh"], 16) == int(st["CapAmb"], 16) == 0
