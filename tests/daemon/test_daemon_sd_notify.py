from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from lamplighter.supervisor.sd_notify import Notifier, NotifyError, socket_address, watchdog_interval


@pytest.fixture
def fs_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = tmp_path / "notify"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(path))
    s.settimeout(10)
    yield s, str(path)
    s.close()


@pytest.fixture
def abstract_socket() -> Iterator[tuple[socket.socket, str]]:
    name = f"lamplighter-test-notify-{os.getpid()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(b"\0" + name.encode())
    s.settimeout(10)
    yield s, "@" + name
    s.close()


@pytest.mark.parametrize("which", ["fs_socket", "abstract_socket"])
def test_notifications_arrive(which: str, request: pytest.FixtureRequest) -> None:
    sock, address = request.getfixturevalue(which)
    n = Notifier.from_env({"NOTIFY_SOCKET": address})
    assert n.enabled
    assert n.ready(status="watching 2 trainers\nsecond line")
    assert sock.recv(4096) == b"READY=1\nSTATUS=watching 2 trainers second line"
    assert n.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert n.status("draining n3")
    assert sock.recv(4096) == b"STATUS=draining n3"
    assert n.stopping()
    assert sock.recv(4096) == b"STOPPING=1"


def test_no_socket_is_a_no_op() -> None:
    n = Notifier.from_env({})
    assert not n.enabled
    assert not n.ready() and not n.watchdog() and not n.stopping()


def test_errors_name_the_socket(tmp_path: Path) -> None:
    n = Notifier(str(tmp_path / "gone"))
    with pytest.raises(NotifyError, match="gone"):
        n.watchdog()
    with pytest.raises(ValueError):
        n.notify("READY=1\nMAINPID=1")


def test_the_daemons_notifier_goes_on_when_the_socket_is_gone_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "notify"
    n = Notifier(str(path), strict=False)
    with caplog.at_level(logging.WARNING, logger="lamplighter.supervisor.sd_notify"):
        assert not n.ready() and not n.watchdog() and not n.watchdog()  # no socket: nothing raised
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1 and "notify" in said[0] and "No such file" in said[0], said
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(path))  # systemd is back
        try:
            assert n.watchdog() and sock.recv(100) == b"WATCHDOG=1"
            assert "works again" in caplog.records[-1].getMessage()
        finally:
            sock.close()


def test_socket_address() -> None:
    assert socket_address("@abc") == b"\0abc"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"


@pytest.mark.parametrize(
    "env,pid,expected",
    [
        ({}, 10, None),
        ({"WATCHDOG_USEC": "30000000"}, 10, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "10"}, 10, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "11"}, 10, None),  # meant for another process
        ({"WATCHDOG_USEC": "0"}, 10, None),
        ({"WATCHDOG_USEC": "soon"}, 10, None),
        ({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "x"}, 10, None),
    ],
)
def test_watchdog_interval(env: dict[str, str], pid: int, expected: float | None) -> None:
    assert watchdog_interval(env, pid) == expected
