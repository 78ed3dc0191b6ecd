"""The bare-metal test hosts really are separate: their own name and address, a crash ends every process of
the host (grandchildren too), a cut link really drops traffic, and down() leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from lamplighter.lab.bare_hosts import HostLab

pytestmark = pytest.mark.integration


def on(lab: HostLab, host: str, code: str, timeout: float = 5) -> subprocess.CompletedProcess[str]:
    argv = ["ip", "netns", "exec", lab.hosts[host].netns, sys.executable, "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def test_hosts_have_names_addresses_crashes_and_cuts(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    server = (
        "import http.server, os, socket, subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(ready)!r}, 'w').write(f'{{socket.gethostname()}} {{child.pid}}')\n"
        "http.server.HTTPServer(('0.0.0.0', 8000), http.server.BaseHTTPRequestHandler).serve_forever()\n"
    )
    with HostLab(["h1", "h2"]) as lab:
        p = lab.start("h1", [sys.executable, "-c", server], dict(os.environ), tmp_path / "h1.log")
        deadline = time.monotonic() + 20
        while not ready.exists() or not ready.read_text():
            assert time.monotonic() < deadline, (tmp_path / "h1.log").read_text()
            time.sleep(0.05)
        name, _ = ready.read_text().split()
        assert name == "h1"
        reach = "import urllib.request; urllib.request.urlopen('http://h1:8000/', timeout=2)"
        got = on(lab, "h2", reach)
        assert "HTTP Error 501" in got.stderr  # h1 answered (BaseHTTPRequestHandler has no GET)
        lab.cut("h1")
        assert "timed out" in on(lab, "h2", reach.replace("timeout=2", "timeout=1")).stderr
        lab.mend("h1")
        assert "HTTP Error 501" in on(lab, "h2", reach).stderr
        inside = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
        assert len(inside) == 2  # the server (the host's PID 1) and the child it started
        lab.crash("h1")
        psutil.wait_procs([psutil.Process(q) for q in inside if psutil.pid_exists(q)], timeout=10)
        assert not [q for q in inside if psutil.pid_exists(q) and psutil.Process(q).status() != psutil.STATUS_ZOMBIE]
        namespaces = [lab.hosts[h].netns for h in lab.hosts]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ns for ns in namespaces if ns in listed]
