"""The Lighthouse /status parser, on pages recorded from the real torchft Lighthouse, and live."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from lamplighter.lighthouse.status import (
    LighthouseStatusError,
    LighthouseStatusUnreadable,
    fetch_status,
    parse_duration,
    parse_status,
)

REC = Path(__file__).parent / "recorded"


def page(name: str) -> str:
    return (REC / name).read_text()


def test_empty_lighthouse() -> None:
    s = parse_status(page("status_empty.html"))
    assert s.quorum_id == 0 and s.members == [] and s.heartbeats == [] and s.previous_quorum_id is None
    assert "need min_replicas 1" in s.next_quorum


def test_stale_heartbeat_is_marked_old_and_members_read() -> None:
    s = parse_status(page("status_one_stale.html"))
    assert s.quorum_id == 2 and s.previous_quorum_id == 2
    assert [(m.group, m.step, m.manager, m.store, m.world_size) for m in s.members] == [
        ("1", 120, "http://127.0.0.1:41001", "127.0.0.1:41002", 1),
        ("2", 120, "http://127.0.0.1:42001", "127.0.0.1:42002", 1),
    ]
    old = {h.group: h.old for h in s.heartbeats}
    assert old == {"0": False, "1": False, "2": True}
    assert s.live_groups() == {"0", "1"}
    assert s.quorum_age_s is not None and 0.7 < s.quorum_age_s < 0.9


def test_healing_page() -> None:
    s = parse_status(page("status_healing.html"))
    assert s.quorum_id == 3 and s.max_step() == 122 and len(s.heartbeats) == 3
    assert s.members[0].replica_id == "0:0f6b2a1c-5d2e-4c1b-9a7e-000000000000"


def test_dashboard_root_is_not_a_status_page() -> None:
    with pytest.raises(LighthouseStatusError, match="not a torchft Lighthouse /status page"):
        parse_status(page("root.html"))


@pytest.mark.parametrize(("text", "seconds"), [("10.5s", 10.5), ("803.2ms", 0.8032), ("1.5µs", 1.5e-6), ("7ns", 7e-9)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_member_without_step_is_an_error_not_a_guess() -> None:
    broken = page("status_one_stale.html").replace("Step: 120", "Stp: 120", 1)
    with pytest.raises(LighthouseStatusError, match="Step"):
        parse_status(broken)


def test_unreachable_lighthouse_is_an_error() -> None:
    with pytest.raises(LighthouseStatusError, match="cannot read"):
        fetch_status("http://127.0.0.1:1", timeout=1)


@pytest.mark.integration
def test_live_lighthouse_with_two_clients() -> None:
    from torchft._torchft import LighthouseClient, LighthouseServer

    lh = LighthouseServer(bind="127.0.0.1:0", min_replicas=2, join_timeout_ms=100, heartbeat_timeout_ms=500)
    try:
        addr = lh.address()
        errors: list[BaseException] = []

        def join(i: int) -> None:
            try:
                c = LighthouseClient(addr, connect_timeout=timedelta(seconds=5))
                c.quorum(
                    replica_id=f"{i}:u{i}",
                    timeout=timedelta(seconds=10),
                    address=f"http://h{i}:1",
                    store_address=f"h{i}:2",
                    step=7,
                    world_size=1,
                    shrink_only=False,
                )
                c.heartbeat(f"{i}:u{i}")
            except BaseException as e:  # collected and re-raised in the test thread
                errors.append(e)

        threads = [threading.Thread(target=join, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not errors
        s = fetch_status(addr)
        assert s.quorum_id >= 1 and sorted(m.group for m in s.members) == ["0", "1"]
        assert {m.step for m in s.members} == {7} and s.live_groups() == {"0", "1"}
    finally:
        lh.shutdown()


def test_member_behind_the_quorum_is_recovering() -> None:
    s = parse_status(page("status_recovering.html"))
    by_group = {m.group: m for m in s.members}
    assert by_group["1"].recovering and by_group["1"].step == 0 and by_group["1"].world_size == 2
    assert not by_group["0"].recovering and by_group["0"].step == 57


class HostileServer:
    """A one-connection-at-a-time HTTP server on 127.0.0.1 that answers as `behave` says."""

    def __init__(self, behave: str) -> None:
        import socket
        import threading

        self.behave = behave
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.finished = threading.Event()  # the trickle sent all it meant to (it must not get there)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        page = (REC / "status_two.html").read_bytes()
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                if self.behave == "redirect":
                    conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/\r\n\r\n")
                elif self.behave == "huge":
                    conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
                    try:
                        for _ in range(64):
                            conn.sendall(b"x" * (1 << 16))
                    except OSError:
                        pass
                elif self.behave == "trickle":
                    try:
                        conn.sendall(b"HTTP/1.1 200 OK\r\n")
                        for _ in range(200):
                            if self.stop.wait(0.05):
                                return
                            conn.sendall(b"X-Slow: y\r\n")
                        self.finished.set()
                    except OSError:
                        pass
                elif self.behave.startswith("page:"):  # a whole 200 answer with that recorded page
                    conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n" + (REC / self.behave[5:]).read_bytes())
                elif self.behave == "chunked":
                    body = b"".join(
                        b"%x\r\n%s\r\n" % (len(page[i : i + 100]), page[i : i + 100]) for i in range(0, len(page), 100)
                    )
                    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n")

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize(
    ("behave", "why"),
    [
        ("redirect", "answered 302, a redirect (not followed)"),
        ("huge", "more than 1048576 bytes"),
        ("trickle", "no whole answer within 0.5 s"),
    ],
)
def test_a_hostile_answer_is_an_error_never_followed_never_waited_out(behave: str, why: str) -> None:
    server = HostileServer(behave)
    try:
        with pytest.raises(LighthouseStatusError, match=re.escape(why)):
            fetch_status(f"http://127.0.0.1:{server.port}", timeout=0.5)
        assert not server.finished.is_set()  # the trickle was still going when the reader gave up
    finally:
        server.close()


def test_a_chunked_answer_is_read() -> None:
    server = HostileServer("chunked")
    try:
        status = fetch_status(f"http://127.0.0.1:{server.port}", timeout=5)
    finally:
        server.close()
    assert status == parse_status((REC / "status_two.html").read_text())


def test_a_page_of_another_torchft_is_unreadable_not_an_outage() -> None:
    """A Lighthouse that answers a page the parser does not know is told apart from one that is down: the
    daemon says the first in the job's run directory (no hang check from it), and excuses the second."""
    with pytest.raises(LighthouseStatusUnreadable, match="Current quorum_id"):
        parse_status(page("variant_renamed_labels.html"))
    server = HostileServer("page:variant_renamed_labels.html")
    try:
        with pytest.raises(LighthouseStatusUnreadable, match="answered a page this lamplighter cannot read"):
            fetch_status(f"http://127.0.0.1:{server.port}", timeout=5)
    finally:
        server.close()
    with pytest.raises(LighthouseStatusError) as down:
        fetch_status("http://127.0.0.1:1", timeout=1)
    assert not isinstance(down.value, LighthouseStatusUnreadable)


# The same scenarios recorded from the pinned nightly (recorded/) and from torchft 0.2.0, the newest stable release
# (recorded/torchft-0.2.0/, see its README.txt): the reader must read both alike.
STABLE = "torchft-0.2.0/"


@pytest.mark.parametrize("name", ["status_empty.html", STABLE + "status_empty.html"])
def test_empty_lighthouse_of_each_version(name: str) -> None:
    s = parse_status(page(name))
    assert s.quorum_id == 0 and s.previous_quorum_id is None and s.quorum_age_s is None
    assert s.members == [] and s.heartbeats == [] and s.max_step() is None
    assert s.next_quorum.startswith("New quorum not ready, only have 0 participants, need min_replicas 1")


@pytest.mark.parametrize(("name", "quorum_id"), [("status_two.html", 3), (STABLE + "status_two.html", 1)])
def test_two_members_and_an_old_heartbeat_of_each_version(name: str, quorum_id: int) -> None:
    s = parse_status(page(name))
    assert s.quorum_id == quorum_id and s.previous_quorum_id == quorum_id
    assert [(m.replica_id, m.group, m.step, m.manager, m.store, m.world_size, m.recovering) for m in s.members] == [
        ("0:0f6b2a1c-5d2e-4c1b-9a7e-000000000000", "0", 121, "http://127.0.0.1:40001", "127.0.0.1:40002", 1, False),
        ("1:0f6b2a1c-5d2e-4c1b-9a7e-000000000001", "1", 121, "http://127.0.0.1:41001", "127.0.0.1:41002", 1, False),
    ]
    assert s.max_step() == 121
    beats = {h.replica_id: h for h in s.heartbeats}
    assert sorted(beats) == [f"{i}:0f6b2a1c-5d2e-4c1b-9a7e-00000000000{i}" for i in range(3)]
    assert {h.group: h.old for h in s.heartbeats} == {"0": False, "1": False, "2": True}
    assert s.live_groups() == {"0", "1"}
    assert all(beats[r].age_s < 0.1 for r in beats if not beats[r].old)
    assert 0.8 < beats["2:0f6b2a1c-5d2e-4c1b-9a7e-000000000002"].age_s < 1.0  # it heartbeated once, 0.8 s before
    assert s.quorum_age_s is not None and 0 < s.quorum_age_s < 0.1
    assert "[2 heartbeating]" in s.next_quorum


@pytest.mark.parametrize("name", ["status_recovering.html", STABLE + "status_recovering.html"])
def test_member_behind_the_quorum_is_recovering_in_each_version(name: str) -> None:
    s = parse_status(page(name))
    assert s.quorum_id == 1 and s.previous_quorum_id == 1 and "need min_replicas 2" in s.next_quorum
    assert [(m.replica_id, m.step, m.manager, m.store, m.world_size, m.recovering) for m in s.members] == [
        ("0:7d1e0c52-8a43-4f7e-b0a1-000000000000", 57, "http://127.0.0.1:40001", "127.0.0.1:40002", 2, False),
        ("1:7d1e0c52-8a43-4f7e-b0a1-000000000001", 0, "http://127.0.0.1:41001", "127.0.0.1:41002", 2, True),
    ]
    assert sorted(h.replica_id for h in s.heartbeats) == [f"{i}:7d1e0c52-8a43-4f7e-b0a1-00000000000{i}" for i in (0, 1)]
    assert s.live_groups() == {"0", "1"} and s.max_step() == 57


@pytest.mark.parametrize("name", ["root.html", STABLE + "root.html"])
def test_dashboard_root_of_each_version_is_unreadable_as_status(name: str) -> None:
    with pytest.raises(LighthouseStatusUnreadable, match="not a torchft Lighthouse /status page"):
        parse_status(page(name))


def test_a_stable_release_page_is_read_over_http() -> None:
    server = HostileServer("page:" + STABLE + "status_two.html")
    try:
        status = fetch_status(f"http://127.0.0.1:{server.port}", timeout=5)
    finally:
        server.close()
    assert status == parse_status(page(STABLE + "status_two.html")) and status.live_groups() == {"0", "1"}


def test_a_stable_release_page_with_a_member_cut_short_is_an_error() -> None:
    cut = page(STABLE + "status_two.html").replace("TCPStore: 127.0.0.1:41002", "", 1)
    with pytest.raises(LighthouseStatusUnreadable, match="TCPStore"):
        parse_status(cut)
