"""A lab with a network namespace per node (LabSettings(netns=True), make scale's) runs each node daemon in its
node's namespaces, as its slurmd: network, PIDs and mounts. Its /proc then holds the node's processes alone, as
on a machine of its own, and not every lab node's (what made a daemon's scan cost grow with the lab's size).

Real slurmd, real daemons (`lamplighter supervise`), real namespaces: what the daemon sees is read through its
own root (/proc/PID/root/proc), chaos finds it as it finds any daemon, and it dies and comes back with its node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from realparts import require_netns, require_slurm, wait_for

from lamplighter.lab.slurm_lab import LabSettings, SlurmLab, running_lab
from lamplighter.lab.testcluster import TestCluster, is_alive
from lamplighter.slurm.chaos import proc_find
from lamplighter.system.procfs import PROC, ProcStat, children

MARK = "ll-mark-{node}"
SLEEP = "import time; time.sleep(600)"


def slurmd_of(cluster: TestCluster, node: str) -> int:
    (pid,) = children(PROC, cluster.records()[f"node-{node}"].pid)
    return pid


def same_namespaces(a: int, b: int) -> bool:
    return all(os.readlink(f"/proc/{a}/ns/{ns}") == os.readlink(f"/proc/{b}/ns/{ns}") for ns in ("pid", "mnt", "net"))


def cmdlines_seen_by(pid: int) -> set[str]:
    """The command lines in the /proc the process sees (its own mount namespace's, through its root)."""
    seen = set()
    for d in Path(f"/proc/{pid}/root/proc").iterdir():
        if d.name.isdigit():
            try:
                seen.add((d / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
            except OSError:
                continue
    return seen


def seen_with(pid: int | None, cmdline: str) -> set[str] | None:
    assert pid is not None
    seen = cmdlines_seen_by(pid)
    return seen if cmdline in seen else None


def daemons_of(lab: SlurmLab, node: str) -> list[ProcStat]:
    """What chaos takes for the node's daemon (its environment), in this lab alone: other labs run beside it."""
    return proc_find.supervisor_procs(node, str(lab.cluster.conf_path))


@pytest.mark.integration
def test_each_node_daemon_runs_in_its_nodes_namespaces_and_sees_only_its_nodes_processes(tmp_path: Path) -> None:
    require_slurm()
    require_netns()
    with running_lab(tmp_path / "lab", LabSettings(compute_nodes=2, gpus_per_node=1, netns=True)) as lab:
        cluster = lab.cluster
        daemons = {n: lab.services.pid(f"supervise-{n}") for n in cluster.node_names}
        for node, pid in daemons.items():
            assert pid is not None and same_namespaces(pid, slurmd_of(cluster, node)), node
            assert not same_namespaces(pid, os.getpid())
            # Chaos finds the daemon itself by its environment, not the nsenter that started it.
            assert pid in [p.pid for p in daemons_of(lab, node)]
            assert "nsenter" not in [p.comm for p in daemons_of(lab, node)]

        # A marker on each compute node, started there as the daemon was.
        marks = {}
        for node in lab.compute:
            argv = [*cluster.node_enter(node), sys.executable, "-c", SLEEP, MARK.format(node=node)]
            marks[node] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            a, b = lab.compute
            mark_a, mark_b = (f"{sys.executable} -c {SLEEP} {MARK.format(node=n)}" for n in (a, b))
            seen_a = wait_for(lambda: seen_with(daemons[a], mark_a), 10, f"{a}'s mark")
            seen_b = wait_for(lambda: seen_with(daemons[b], mark_b), 10, f"{b}'s mark")
            assert mark_b not in seen_a and mark_a not in seen_b
            # Neither sees the host's processes (this test) nor another node's daemon.
            mine = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            assert mine not in seen_a | seen_b
            assert sum("supervise --config" in c for c in seen_a) == 1
        finally:
            for p in marks.values():
                for child in children(PROC, p.pid):  # nsenter does not pass signals on
                    os.kill(child, signal.SIGKILL)
                p.wait(10)

        # Killed, the daemon comes back in its node's namespaces (systemd's Restart=always).
        old = daemons[a]
        os.kill(old, signal.SIGKILL)
        new = wait_for(lambda: (p := lab.services.pid(f"supervise-{a}")) != old and p, 30, "the daemon's restart")
        assert same_namespaces(new, slurmd_of(cluster, a))

        # A crashed node takes its daemon with it; the node back, the daemon runs in the new node's namespaces.
        cluster.crash_node(b)
        assert not daemons_of(lab, b)
        wait_for(lambda: lab.services.pid(f"supervise-{b}") is None, 10, "the nsenter of the dead daemon to end")
        cluster.restart_node(b)
        back = wait_for(lambda: lab.services.pid(f"supervise-{b}"), 30, "the daemon on the node back")
        assert same_namespaces(back, slurmd_of(cluster, b))
        started = [s.record for s in lab.services.services.values() if s.record is not None]
    # Down: no daemon and no nsenter left.
    assert not [p for n in cluster.node_names for p in daemons_of(lab, n)]
    assert not [r for r in started if is_alive(r)]
