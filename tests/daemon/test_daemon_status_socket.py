from __future__ import annotations

import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lamplighter.supervisor.status_socket import StatusError, StatusServer, read_status


@pytest.fixture
def sock_path(tmp_path: Path) -> Path:
    return tmp_path / "run" / "s.sock"


@pytest.fixture
def server(sock_path: Path) -> Iterator[StatusServer]:
    calls: list[int] = []

    def status() -> dict[str, Any]:
        calls.append(1)
        return {"node": "n1", "trainers": [{"pid": 12, "job": "llama"}], "calls": len(calls)}

    srv = StatusServer(sock_path, status).start()
    yield srv
    srv.close()


def test_permissions_and_content(server: StatusServer, sock_path: Path) -> None:
    st = os.lstat(sock_path)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o660
    assert stat.S_IMODE(os.stat(sock_path.parent).st_mode) == 0o750
    assert [p.name for p in sock_path.parent.iterdir()] == ["s.sock"]  # no temporary name left behind
    doc = read_status(sock_path, timeout=10)
    assert doc["node"] == "n1" and doc["trainers"] == [{"pid": 12, "job": "llama"}]
    assert read_status(sock_path, timeout=10)["calls"] == 2


def _raw(path: Path, send: bytes, read: bool = True) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(path))
        try:
            s.sendall(send)
        except OSError:
            pass  # the server does not read; it may be gone already
        if not read:
            return b""
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_garbage_cannot_crash_or_command_it(server: StatusServer, sock_path: Path) -> None:
    for junk in [
        b"",
        b"\x00\xff" * 1000,
        b'{"action": "drain", "node": "n1"}\n',
        b"GET / HTTP/1.0\r\n\r\n",
        os.urandom(300_000),
    ]:
        answer = _raw(sock_path, junk)
        assert b'"node": "n1"' in answer  # always the same read-only document
    _raw(sock_path, b"x", read=False)  # a client that hangs up without reading
    assert read_status(sock_path, timeout=10)["node"] == "n1"


def test_broken_status_callable_answers_an_error(sock_path: Path) -> None:
    def status() -> dict[str, Any]:
        raise RuntimeError("state dir gone")

    srv = StatusServer(sock_path, status).start()
    try:
        assert "state dir gone" in read_status(sock_path, timeout=10)["error"]
        assert "state dir gone" in read_status(sock_path, timeout=10)["error"]
    finally:
        srv.close()
    assert not sock_path.exists()


def test_stale_socket_replaced_live_one_refused(sock_path: Path) -> None:
    sock_path.parent.mkdir(mode=0o750)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock_path))
    stale.close()  # as a SIGKILLed daemon leaves it: the file, nobody listening
    srv = StatusServer(sock_path, lambda: {"ok": True}).start()
    try:
        assert read_status(sock_path, timeout=10) == {"ok": True}
        with pytest.raises(OSError, match="another daemon"):
            StatusServer(sock_path, lambda: {}).start()
    finally:
        srv.close()


def test_refuses_to_replace_a_regular_file(sock_path: Path) -> None:
    sock_path.parent.mkdir()
    sock_path.write_text("not a socket")
    with pytest.raises(OSError, match="not a socket"):
        StatusServer(sock_path, lambda: {}).start()
    assert sock_path.read_text() == "not a socket"


def test_client_errors_name_the_socket(tmp_path: Path) -> None:
    with pytest.raises(StatusError, match="not there"):
        read_status(tmp_path / "none.sock", timeout=1)
    path = tmp_path / "bad.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(str(path))
        srv.listen(1)

        def answer_junk() -> None:
            conn, _ = srv.accept()
            with conn:
                conn.sendall(b"not json")

        t = threading.Thread(target=answer_junk)
        t.start()
        with pytest.raises(StatusError, match=r"bad\.sock: answer is not JSON"):
            read_status(path, timeout=10)
        t.join(timeout=10)
        # Nobody answers the next one: a timeout, with the path in the message.
        with pytest.raises(StatusError, match=r"bad\.sock"):
            read_status(path, timeout=0.2)
