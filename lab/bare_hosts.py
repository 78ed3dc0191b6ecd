"""Test hosts for bare metal: each in its own network, PID, mount and UTS namespace on this machine.

A bridge in the root namespace holds `<prefix>.1` (where the lab's etcd and
Lighthouse listen); each host is a network namespace joined to it by a veth
pair, with its own address `<prefix>.<10+i>` and its own host name, which every
host resolves (ip netns exec binds /etc/netns/<ns>/hosts over /etc/hosts).
Processes started on a host run under `unshare --pid --fork --kill-child`: the
host's PID 1 is that unshare's child, so `crash(host)` (SIGKILL of the unshare)
ends every process of the host at once, as a power loss does; `cut(host)` takes
its link down (its processes live on, cut off), `mend(host)` brings it back.

Everything is named with a per-lab tag; `down()` removes only what this lab
created and ends only the processes it started, by PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

NETNS_ETC = Path("/etc/netns")


class HostLabError(RuntimeError):
    pass


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if out.returncode != 0:
        raise HostLabError(f"ip {' '.join(args)}: {out.stderr.strip()}")


@dataclass
class Host:
    name: str
    netns: str
    address: str
    veth_root: str  # the root namespace's end, on the bridge: down = the host is cut off
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)


@dataclass
class HostLab:
    names: list[str]
    tag: str = field(default_factory=lambda: f"{os.getpid() % 10000}")
    subnet: int = 0  # 10.231.<subnet>.0/24; 0: derived from the tag
    hosts: dict[str, Host] = field(default_factory=dict)
    bridge: str = ""
    up_done: bool = False

    def __post_init__(self) -> None:
        if not self.subnet:
            self.subnet = 1 + int(self.tag) % 250
        self.bridge = f"llbr{self.tag}"

    @property
    def gateway(self) -> str:
        """The bridge's address in the root namespace: where etcd and the Lighthouse listen."""
        return f"10.231.{self.subnet}.1"

    def up(self) -> HostLab:
        if shutil.which("ip") is None or shutil.which("unshare") is None:
            raise HostLabError("the host lab needs iproute2 and util-linux (ip, unshare)")
        self.up_done = True  # down() cleans a half-built lab too
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, name in enumerate(self.names):
            h = Host(name, f"ll{self.tag}-{name}", f"10.231.{self.subnet}.{10 + i}", f"llv{self.tag}h{i}")
            self.hosts[name] = h
            _ip("netns", "add", h.netns)
            _ip("link", "add", h.veth_root, "type", "veth", "peer", "name", "eth0", "netns", h.netns)
            _ip("link", "set", h.veth_root, "master", self.bridge)
            _ip("link", "set", h.veth_root, "up")
            _ip("-n", h.netns, "addr", "add", f"{h.address}/24", "dev", "eth0")
            _ip("-n", h.netns, "link", "set", "eth0", "up")
            _ip("-n", h.netns, "link", "set", "lo", "up")
        lines = ["127.0.0.1 localhost", f"{self.gateway} lab-gateway"]
        lines += [f"{h.address} {h.name}" for h in self.hosts.values()]
        for h in self.hosts.values():
            etc = NETNS_ETC / h.netns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text("\n".join(lines) + "\n")
        return self

    def start(self, host: str, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        """Run argv on `host`: its network, a PID namespace of the host's own (PID 1 dies: all die), its name."""
        h = self.hosts[host]
        wrapped = [
            "ip", "netns", "exec", h.netns,
            "unshare", "--pid", "--fork", "--mount-proc", "--uts", "--kill-child",
            "sh", "-c", 'hostname "$0" && exec "$@"', h.name, *argv,
        ]  # fmt: skip
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            p = subprocess.Popen(wrapped, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        h.procs.append(p)
        return p

    def crash(self, host: str) -> None:
        """Power loss: every process of the host dies at once (SIGKILL of each PID namespace's parent)."""
        for p in self.hosts[host].procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
        self.hosts[host].procs.clear()

    def cut(self, host: str) -> None:
        _ip("link", "set", self.hosts[host].veth_root, "down")

    def mend(self, host: str) -> None:
        _ip("link", "set", self.hosts[host].veth_root, "up")

    def down(self) -> None:
        if not self.up_done:
            return
        for name in list(self.hosts):
            self.crash(name)
        for h in self.hosts.values():
            subprocess.run(["ip", "netns", "del", h.netns], capture_output=True, timeout=20)
            shutil.rmtree(NETNS_ETC / h.netns, ignore_errors=True)
            subprocess.run(["ip", "link", "del", h.veth_root], capture_output=True, timeout=20)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=20)
        if NETNS_ETC.is_dir() and not any(NETNS_ETC.iterdir()):
            NETNS_ETC.rmdir()  # it was made for the lab's hosts files
        self.hosts.clear()
        self.up_done = False

    def __enter__(self) -> HostLab:
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc: object) -> None:
        self.down()
