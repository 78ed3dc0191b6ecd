"""TCP ports: a free one (the Lighthouse, each group's rendezvous in local mode), and whether one answers."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the usual bind-to-0 trick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def accepts_connections(host: str, port: int, timeout_s: float = 0.2) -> bool:
    """Does something accept TCP connections there (the Lighthouse, a node's slurmd)?"""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
