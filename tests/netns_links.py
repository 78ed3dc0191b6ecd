"""A real link for tests: a veth pair in a network namespace of its own, read from inside it.

The `netns` fixture (tests/conftest.py) makes the namespace with `lla0` <-> `llb0`, both up;
`ip(ns, ...)` changes them; `read_in(ns, names)` reads them with lamplighter's sysfs reader
run inside the namespace (`ip netns exec` mounts the namespace's own /sys).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from lamplighter.system.sysfs import LinkReading


def make_netns() -> Iterator[str]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (ip netns, veth)")
    name = f"ll-links-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    try:
        ip(name, "link", "add", "lla0", "type", "veth", "peer", "name", "llb0")
        ip(name, "link", "set", "lla0", "up")
        ip(name, "link", "set", "llb0", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, timeout=30)


def ip(ns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", ns, *args], check=True, timeout=30, capture_output=True)


def read_in(ns: str, names: list[str]) -> list[LinkReading]:
    """The reader run inside the namespace: `ip netns exec` mounts the namespace's own /sys."""
    code = (
        "import json, dataclasses, sys; from pathlib import Path; "
        "from lamplighter.system.sysfs import read_links; "
        "print(json.dumps([dataclasses.asdict(r) for r in read_links(Path('/sys'), sys.argv[1:], [])]))"
    )
    out = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", code, *names],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [LinkReading(**r) for r in json.loads(out.stdout)]


@dataclass(frozen=True)
class NetnsLinks:
    """A LinkReader (supervisor/checks/links.py) of links in a namespace: a daemon's view of them."""

    ns: str
    names: tuple[str, ...]

    def read(self) -> list[LinkReading]:
        return read_in(self.ns, list(self.names))
