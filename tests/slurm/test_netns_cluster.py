"""The test cluster with each node in a network namespace of its own (TestCluster(netns=True)).

The pure tests check the derived names and addresses; the integration test starts real slurmctld and
slurmd in real namespaces (root, iproute2) and runs a 2-node step whose tasks talk across them.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from realparts import require_netns, require_slurm

from lamplighter.lab.testcluster import TestCluster
from lamplighter.lab.testcluster_conf import render_slurm_conf
from lamplighter.lab.testcluster_net import IFNAMSIZ, MAX_NODES, NETNS_RUN, ClusterNet
from lamplighter.slurm.actions import SlurmActions, poll_job
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.system.procfs import PROC, children

WAIT = 60.0
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
TASK_PORT = 7000  # free in every node's namespace: only slurmd's port is taken there

# Each task prints its node and the address its traffic leaves from (a UDP connect sends nothing); rank 0 listens
# on its node's address, rank 1 connects to it from its own namespace, and rank 0 prints who it heard from where.
TASK = """\
import os, socket, sys, time
gateway, peer, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
rank, node = int(os.environ["SLURM_PROCID"]), os.environ["SLURMD_NODENAME"]
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
probe.connect((gateway, 9))
addr = probe.getsockname()[0]
if rank == 0:
    conn, (src, _) = socket.create_server((addr, port)).accept()
    print(f"task {node} {addr} heard {conn.recv(64).decode()} from {src}", flush=True)
else:
    deadline = time.monotonic() + 30
    while True:  # until rank 0 listens (it starts at the same time, on the other node)
        try:
            conn = socket.create_connection((peer, port), timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    conn.sendall(node.encode())
    print(f"task {node} {addr} sent", flush=True)
"""


def test_names_and_addresses_are_each_clusters_own_and_fit_ifnamsiz() -> None:
    ports = [20000, 20001, 20256, 28999, 65535]
    nets = [ClusterNet(p, MAX_NODES) for p in ports]
    for net in nets:
        links = [net.bridge] + [net.veth(n) for n in net.node_names()]
        assert max(len(name) for name in links) <= IFNAMSIZ
        assert len(set(links)) == len(links)
        addrs = [net.address(n) for n in net.node_names()]
        assert len(set(addrs)) == MAX_NODES and net.gateway not in addrs
        assert all(a.startswith(net.subnet + ".") for a in [*addrs, net.gateway])
        # slurm.conf's NodeAddr, expanded as Slurm does, gives node i its own address.
        assert expand_hostlist(net.node_addr_range()) == addrs
    for a, b in itertools.combinations(nets, 2):
        assert a.subnet != b.subnet and a.bridge != b.bridge
        assert not {a.netns(n) for n in a.node_names()} & {b.netns(n) for n in b.node_names()}
        assert not {a.veth(n) for n in a.node_names()} & {b.veth(n) for n in b.node_names()}
    assert expand_hostlist(ClusterNet(20000, 1).node_addr_range()) == [ClusterNet(20000, 1).address("n1")]
    with pytest.raises(ValueError):
        ClusterNet(20000, MAX_NODES + 1)
    with pytest.raises(ValueError):
        TestCluster(Path("unused"), nodes=MAX_NODES + 1, netns=True)


def test_conf_puts_slurmctld_on_the_bridge_and_each_node_at_its_address(tmp_path: Path) -> None:
    net = ClusterNet(24000, 3)
    conf = render_slurm_conf(tmp_path, 3, 24000, network=net).splitlines()
    assert f"SlurmctldHost=localhost({net.gateway})" in conf
    (nodes,) = (line for line in conf if line.startswith("NodeName="))
    assert f"NodeAddr={net.node_addr_range()}" in nodes.split() and "Port=24001" in nodes.split()
    # Off (the default), the nodes share the host's network as before.
    plain = render_slurm_conf(tmp_path, 3, 24000).splitlines()
    assert "SlurmctldHost=localhost" in plain and not any("NodeAddr" in line for line in plain)
    off = TestCluster(tmp_path / "c", nodes=2)
    assert off.network is None and off.node_netns("n1") is None and off.node_address("n1") == "localhost"
    assert off.node_argv("n1", ["true"]) == ["true"]


def net_inode(pid: int | str) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def slurmd_pid(cluster: TestCluster, node: str) -> int:
    """slurmd is the one child of the node's recorded unshare."""
    (pid,) = children(PROC, cluster.records()[f"node-{node}"].pid)
    return pid


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True, timeout=30)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


@pytest.mark.integration
def test_nodes_in_network_namespaces_run_two_node_steps_and_down_removes_them(tmp_path: Path) -> None:
    require_slurm()
    require_netns()
    cluster = TestCluster(tmp_path / "cluster", nodes=3, netns=True)
    cluster.up()
    try:
        net = cluster.network
        assert net is not None
        made = {cluster.node_netns(n) for n in cluster.node_names}
        assert made <= netns_names() and Path("/sys/class/net", net.bridge).exists()

        # Each slurmd in its node's namespace: not the host's, not another node's.
        inodes = {n: net_inode(slurmd_pid(cluster, n)) for n in cluster.node_names}
        assert net_inode("self") not in inodes.values() and len(set(inodes.values())) == 3
        assert all(inodes[n] == os.stat(NETNS_RUN / net.netns(n)).st_ino for n in cluster.node_names)
        infos = {i.name: i.fields["NodeAddr"] for i in cluster.node_infos()}
        assert infos == {n: net.address(n) for n in cluster.node_names}
        assert len(set(infos.values())) == 3

        task = tmp_path / "task.py"
        task.write_text(TASK)
        cli = cluster.cli(timeout=WAIT)

        # srun on the host: both tasks' output comes back across the bridge.
        args = [sys.executable, str(task), net.gateway, net.address("n2"), str(TASK_PORT)]
        out = cli.run("srun", "-N2", "-n2", "--nodelist=n2,n3", *args)
        a2, a3 = net.address("n2"), net.address("n3")
        assert f"task n2 {a2} heard n3 from {a3}" in out and f"task n3 {a3} sent" in out

        # Machines of their own: each node has its name as its host name, and every node resolves every name to
        # that node's address (a Manager advertising $(hostname) is reached from its peers).
        names = "import socket; h = socket.gethostname(); print(h, socket.gethostbyname(h), socket.gethostbyname('n3'))"
        out = cli.run("srun", "-N2", "-n2", "--nodelist=n2,n3", sys.executable, "-c", names)
        assert sorted(out.split("\n")[:2]) == [f"n2 {a2} {a3}", f"n3 {a3} {a3}"], out

        # srun inside a batch job, in n1's namespace: n2's task and its output cross from namespace to namespace.
        api = SlurmActions(cli)
        log = tmp_path / "job.out"
        step = " ".join(
            ["srun", "-N2", "-n2", sys.executable, str(task), net.gateway, net.address("n1"), str(TASK_PORT)]
        )
        jid = int(cli.run("sbatch", "--parsable", "-N2", "--nodelist=n1,n2", f"--output={log}", f"--wrap={step}"))
        job = poll_job(api, jid, lambda j: j.state in ENDED, WAIT, "the job's end")
        text = log.read_text()
        assert job.state == "COMPLETED", text
        a1 = net.address("n1")
        assert f"task n1 {a1} heard n2 from {a2}" in text and f"task n2 {a2} sent" in text

        # down() from a fresh process finds what to remove in the cluster's records.
        code = "import sys; from pathlib import Path; from lamplighter.lab.testcluster import TestCluster; "
        code += "TestCluster(Path(sys.argv[1])).down()"
        subprocess.run([sys.executable, "-c", code, str(cluster.root)], check=True, timeout=60)
        assert not made & netns_names()
        assert not Path("/sys/class/net", net.bridge).exists()
        assert not any(Path("/sys/class/net", net.veth(n)).exists() for n in cluster.node_names)
        assert cluster.network is not None  # this object still knows its names (netns=True) ...
        assert TestCluster(cluster.root).network is None  # ... but nothing is recorded any more
    finally:
        cluster.down()
