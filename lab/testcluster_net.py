"""The test cluster's optional node network: each node in a network namespace of its own, with its own address.

One Linux bridge per cluster on the host holds the controller's address (slurmctld listens there);
each node is a network namespace joined to it by a veth pair (`eth0` inside, loopback up), with the
address Slurm knows as its NodeAddr. Names and subnet are derived from the cluster's slurmctld port,
which no other cluster on this machine can hold at the same time: clusters side by side (pytest-xdist)
get networks of their own. Only the network is the node's own: host name and /etc/hosts stay the
machine's here; TestCluster gives each node its own host name too (a UTS namespace) and a hosts file of
the cluster's (`hosts_text`, bind-mounted on /etc/hosts in the node's mount namespace), so that on every
node `hostname` is the node's name and resolves to the node's address, as on a cluster: a torchft Manager
that advertises $(hostname), or a Lighthouse that binds it, is reached from the other nodes.

Every bridge, veth and namespace is recorded under the cluster's folder once it exists, so that
`remove_network` (also from a fresh process) deletes only what this cluster made.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lamplighter.rundir.contract import write_json_atomic

NETWORK_FILE = "network.json"
NETNS_RUN = Path("/run/netns")  # where `ip netns add` binds a namespace to its name
IFNAMSIZ = 15  # a link name's longest, in bytes (the kernel's IFNAMSIZ less the NUL)
FIRST_HOST = 10  # node i has <subnet>.<FIRST_HOST + i>; .1 is the bridge
MAX_NODES = 254 - FIRST_HOST


class NetworkError(RuntimeError):
    """A bridge, veth or namespace could not be made or removed."""


@dataclass(frozen=True)
class ClusterNet:
    """Names and addresses of one cluster's node network, all derived from its slurmctld port."""

    port: int
    nodes: int

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ValueError(f"no such port: {self.port}")
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"a node network holds 1 to {MAX_NODES} nodes, not {self.nodes}")

    @property
    def subnet(self) -> str:
        """10.<port's high byte>.<port's low byte>: one /24 per port, so one per running cluster."""
        return f"10.{self.port >> 8}.{self.port & 255}"

    @property
    def gateway(self) -> str:
        """The bridge's address on the host: where slurmctld (and anything else of the host) is reached."""
        return f"{self.subnet}.1"

    @property
    def bridge(self) -> str:
        return f"llsc{self.port}"

    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    def index(self, node: str) -> int:
        if node not in self.node_names():
            raise ValueError(f"no node {node!r} in a network of {self.nodes} nodes")
        return int(node[1:])

    def address(self, node: str) -> str:
        return f"{self.subnet}.{FIRST_HOST + self.index(node)}"

    def netns(self, node: str) -> str:
        return f"llsc{self.port}-{node}"

    def veth(self, node: str) -> str:
        """The host's end of the node's veth pair (on the bridge); the node's end is `eth0` in its namespace."""
        return f"llsc{self.port}v{self.index(node)}"

    def node_addr_range(self) -> str:
        """Every node's address as one hostlist expression, in NodeName=n[1-N] order (slurm.conf's NodeAddr)."""
        first = FIRST_HOST + 1
        return f"{self.subnet}.[{first}-{first + self.nodes - 1}]" if self.nodes > 1 else f"{self.subnet}.{first}"

    def hosts_text(self, controller: str) -> str:
        """The cluster's /etc/hosts: every node's name at its address, the controller's host at the bridge."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback", f"{self.gateway}\t{controller}"]
        lines += [f"{self.address(n)}\t{n}" for n in self.node_names()]
        return "\n".join(lines) + "\n"

    def in_netns(self, node: str, argv: list[str]) -> list[str]:
        """argv run in the node's network namespace; nsenter execs (no fork): the PID is argv's.

        Not `ip netns exec`: it mounts a fresh /sys, without the cgroup v1 hierarchies under /sys/fs/cgroup
        that slurmd's proctrack/cgroup needs ("cgroup namespace 'freezer' not mounted. aborting")."""
        return ["nsenter", f"--net={NETNS_RUN / self.netns(node)}", "--", *argv]


# -- records ---------------------------------------------------------------


def _load(run_dir: Path) -> dict[str, object] | None:
    try:
        raw = json.loads((run_dir / NETWORK_FILE).read_text())
    except FileNotFoundError:
        return None
    return raw if isinstance(raw, dict) else None


def _save(run_dir: Path, net: ClusterNet, made: list[list[str]]) -> None:
    write_json_atomic(run_dir / NETWORK_FILE, {"port": net.port, "nodes": net.nodes, "made": made}, umask=True)


def recorded_network(run_dir: Path) -> ClusterNet | None:
    """The node network recorded under a cluster's run folder (a fresh process's view), if it has one."""
    raw = _load(run_dir)
    if raw is None:
        return None
    port, nodes = raw.get("port"), raw.get("nodes")
    return ClusterNet(port, nodes) if isinstance(port, int) and isinstance(nodes, int) else None


def _made(run_dir: Path) -> list[list[str]]:
    raw = _load(run_dir)
    made = raw.get("made") if raw else None
    return [list(m) for m in made] if isinstance(made, list) else []


# -- making and removing ---------------------------------------------------


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {out.stderr.strip()}")


def subnet_in_use(net: ClusterNet) -> str | None:
    """The host link that already has an address in the cluster's /24 (another lab's), if any."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=30, check=True)
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[3].startswith(f"{net.subnet}."):
            return parts[1]
    return None


def make_network(run_dir: Path, net: ClusterNet) -> None:
    """The bridge, then every node's namespace and veth pair, each recorded as soon as it exists."""
    missing = [p for p in ("ip", "nsenter") if shutil.which(p) is None]
    if missing:
        raise NetworkError(f"a node network needs {' and '.join(missing)} (iproute2, util-linux) and root")
    if (link := subnet_in_use(net)) is not None:
        raise NetworkError(f"{net.subnet}.0/24 is already on {link}: another cluster's network?")
    made = _made(run_dir)

    def record(kind: str, name: str) -> None:
        made.append([kind, name])
        _save(run_dir, net, made)

    _save(run_dir, net, made)
    _ip("link", "add", net.bridge, "type", "bridge")
    record("bridge", net.bridge)
    _ip("addr", "add", f"{net.gateway}/24", "dev", net.bridge)
    _ip("link", "set", net.bridge, "up")
    for node in net.node_names():
        ns, veth = net.netns(node), net.veth(node)
        _ip("netns", "add", ns)
        record("netns", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        record("veth", veth)
        _ip("link", "set", veth, "master", net.bridge, "up")
        _ip("-n", ns, "addr", "add", f"{net.address(node)}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")


REMOVAL_ORDER = {"veth": 0, "netns": 1, "bridge": 2}


def remove_network(run_dir: Path) -> None:
    """Delete what make_network recorded under run_dir, and only that: veths (each takes its peer in the
    namespace along), then namespaces, then the bridge, once it has no port left.

    Call it once no process of the cluster is left in the namespaces: a namespace lives on while one is."""
    net = recorded_network(run_dir)
    if net is None:
        return
    left, errors = [], []
    for kind, name in sorted(_made(run_dir), key=lambda m: REMOVAL_ORDER.get(m[0], 0)):
        try:
            _ip(*(["netns", "del", name] if kind == "netns" else ["link", "del", name]))
        except NetworkError as e:
            if not _gone(str(e)):
                left.append([kind, name])
                errors.append(str(e))
    if errors:
        _save(run_dir, net, left)  # a later down() tries again
        raise NetworkError("; ".join(errors))
    (run_dir / NETWORK_FILE).unlink(missing_ok=True)


def _gone(error: str) -> bool:
    """ip's answer for a link or namespace that is not there (any more)."""
    return "No such file" in error or "Cannot find device" in error or "does not exist" in error
