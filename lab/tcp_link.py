"""A TCP link that can really be cut: a loopback forwarder in front of a server (a host's way to etcd).

`cut()` closes every connection through it and refuses new ones until
`mend()`; the far side sees its peer vanish, as with a pulled cable or a
partition, while both processes keep running. `silence()` drops every byte
instead and answers nothing, as a partition that loses packets does: each
request through it waits out its whole timeout.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field


@dataclass
class TcpLink:
    target: tuple[str, int]
    listen: socket.socket = field(init=False)
    is_cut: bool = False
    is_silent: bool = False
    _conns: list[socket.socket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def __post_init__(self) -> None:
        self.listen = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True, name="tcp-link").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listen.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listen.accept()
            except OSError:
                return
            if self.is_cut:
                client.close()
                continue
            if self.is_silent:  # accepted and never answered (closed by mend)
                with self._lock:
                    self._conns.append(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self.is_silent:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.is_cut = True
        with self._lock:
            for s in self._conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self._conns.clear()

    def silence(self) -> None:
        self.is_silent = True

    def mend(self) -> None:
        if self.is_silent:  # connections that lost bytes are of no use: their clients connect again
            self.cut()
        self.is_cut = self.is_silent = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self.listen.close()
