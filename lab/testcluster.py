"""A real Slurm cluster on this one machine, for tests and demos.

munged, slurmctld and N slurmd "nodes" (Debian's multiple-slurmd build), all
under one folder with their own ports, so several clusters can run at once.
Each slurmd is PID 1 of its own PID+mount namespace: SIGKILL of its `unshare`
parent then takes the node's step daemons and job processes with it, like a
real node failure.

With `netns=True` each node is also in a network namespace of its own, with its own address on a bridge
that holds slurmctld's (testcluster_net): Slurm's traffic between controller, nodes and srun then crosses
real links instead of loopback.

Only processes this object started are ever signalled: they are recorded in
`<root>/run/procs.json` with their start time, so `down()` from a fresh process
(e.g. `python -m lamplighter.lab cluster down`) checks that a PID is still ours before it
sends anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from lamplighter.lab.testcluster_conf import CGROUP_CONF, render_slurm_conf
from lamplighter.lab.testcluster_net import (
    MAX_NODES,
    ClusterNet,
    NetworkError,
    make_network,
    recorded_network,
    remove_network,
)
from lamplighter.rundir.contract import write_json_atomic, write_text_atomic
from lamplighter.slurm.parsers import NodeInfo, parse_scontrol_nodes
from lamplighter.slurm.run import SlurmCli, SlurmError
from lamplighter.system.procfs import PROC, children, ns_pid, read_stat

T = TypeVar("T")

PROCS_FILE = "procs.json"
# Slurm's cgroups (proctrack/cgroup, v1) are machine-wide and name jobs by id only: each cluster takes a block
# of job ids of its own, reserved by a file here while it runs (clusters run side by side under pytest-xdist).
FREEZER = Path("/sys/fs/cgroup/freezer")
JOB_ID_BLOCK = 10_000
JOB_ID_BLOCKS = 6_000  # below Slurm's MaxJobId (67043328)
RESERVED_IDS = Path(tempfile.gettempdir()) / "lamplighter-job-ids"


class ClusterError(RuntimeError):
    """The test cluster could not be started, stopped or queried."""


@dataclass(frozen=True)
class ProcRecord:
    """A process we started: its PID and its kernel start time (to detect PID reuse)."""

    name: str
    pid: int
    start_ticks: int


def is_alive(rec: ProcRecord) -> bool:
    """True if the recorded process still runs (not a zombie, not a reused PID)."""
    st = read_stat(PROC, rec.pid)
    return st is not None and st.start_time == rec.start_ticks and st.state not in ("Z", "X")


def namespace_members(pid: int) -> list[ProcRecord]:
    """Every process in the PID namespace `pid` made for its children (`unshare --pid --fork`: slurmd and
    all below it), as records is_alive can judge."""
    try:
        ns = os.readlink(f"/proc/{pid}/ns/pid_for_children")
    except OSError:
        return []
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                st = read_stat(PROC, int(d.name))
                if st is not None and os.readlink(d / "ns" / "pid") == ns:
                    out.append(ProcRecord(f"ns-{d.name}", int(d.name), st.start_time))
            except OSError:
                continue
    return out


def wait_until(cond: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `cond` until it gives a true value, and return that value; raise ClusterError naming `what` after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if got := cond():
            return got
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)


def _ports_free(ports: list[int]) -> bool:
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                return False
    return True


def pick_port_range(count: int, rng: random.Random | None = None, avoid: Collection[int] = ()) -> int:
    """A base port such that base..base+count-1 are all free right now and none is in `avoid` (ports picked
    for something not listening yet: a cluster's slurmd port inside its nodes' networks, which no bind here sees)."""
    rng = rng or random.Random()
    for _ in range(200):
        # Below torch's 29500 and Linux's ephemeral ports (32768+), clear of MASTER_PORT (30000+).
        base = rng.randrange(20000, 29000 - count)
        ports = range(base, base + count)
        if not any(p in avoid for p in ports) and _ports_free(list(ports)):
            return base
    raise ClusterError(f"found no {count} consecutive free ports")


def used_job_blocks(freezer: Path = FREEZER) -> set[int]:
    """Blocks of job ids some cluster's cgroups on this machine use (left behind by a crashed one, too)."""
    out = set()
    for d in freezer.glob("slurm*/uid_*/job_*"):
        num = d.name[len("job_") :]
        if num.isdigit():
            out.add(int(num) // JOB_ID_BLOCK)
    return out


def reserve_first_job_id(rng: random.Random | None = None, freezer: Path = FREEZER) -> int:
    """A FirstJobId whose block of JOB_ID_BLOCK ids no cgroup and no running cluster on this machine uses."""
    rng = rng or random.Random()
    used = used_job_blocks(freezer)
    RESERVED_IDS.mkdir(parents=True, exist_ok=True)
    for _ in range(200):
        block = rng.randrange(1, JOB_ID_BLOCKS)
        if block in used:
            continue
        try:
            os.close(os.open(RESERVED_IDS / str(block), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        # Clusters side by side share this host's network: offset each block's ids so that their groups' store
        # ports (slurm/submit/render.py: 30000 + job id % 2000) start 100 apart instead of all at 30001.
        return block * JOB_ID_BLOCK + (block % 20) * 100
    raise ClusterError(f"found no free block of {JOB_ID_BLOCK} Slurm job ids (reservations in {RESERVED_IDS})")


def release_job_ids(first_job_id: int, freezer: Path = FREEZER) -> None:
    """The cluster is down: remove the empty cgroups its jobs left (a crashed node's) and free its block."""
    block = first_job_id // JOB_ID_BLOCK
    for job in freezer.glob("slurm*/uid_*/job_*"):
        num = job.name[len("job_") :]
        if not num.isdigit() or int(num) // JOB_ID_BLOCK != block:
            continue
        for d in sorted((p for p in job.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [job]:
            try:
                d.rmdir()  # a cgroup with processes in it refuses: left alone
            except OSError:
                pass
    (RESERVED_IDS / str(block)).unlink(missing_ok=True)


def keep_text(path: Path, text: str) -> None:
    """`path` holds `text`: rewritten (atomically) only if it holds something else. The hosts file is
    bind-mounted by each node as it starts, while the next node is being started: a rename over it in
    between fails that mount (mount(2): ENOENT on a source unlinked under it), and the node dies."""
    try:
        if path.read_text() == text:
            return
    except FileNotFoundError:
        pass
    write_text_atomic(path, text)


class TestCluster:
    """munged + slurmctld + `nodes` slurmd, all under `root`."""

    __test__ = False  # not a pytest test class despite the name

    def __init__(
        self,
        root: Path,
        nodes: int = 3,
        base_port: int | None = None,
        conf: dict[str, str] | None = None,
        netns: bool = False,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {nodes}")
        if netns and nodes > MAX_NODES:
            raise ValueError(f"a node network (one /24) holds at most {MAX_NODES} nodes, got {nodes}")
        self.root = Path(root).resolve()
        # Unix sockets (munged's, the step daemons' in the spool) take at most 107 bytes of path: a short folder
        # for them, named after the root so that down() from a fresh process finds it.
        self.sockets = Path(tempfile.gettempdir()) / f"ll-{hashlib.sha1(str(self.root).encode()).hexdigest()[:10]}"
        self.nodes = nodes
        self.base_port = base_port
        self.conf_overrides = dict(conf or {})
        # Each node in a network namespace of its own (testcluster_net); a fresh process learns it from the records.
        self.netns = netns
        self.first_job_id: int | None = None
        self._popen: dict[str, subprocess.Popen[bytes]] = {}

    # -- paths -------------------------------------------------------------

    @property
    def conf_path(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    def env(self) -> dict[str, str]:
        """Environment a Slurm client needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf_path)}

    def cli(self, timeout: float = 10.0) -> SlurmCli:
        return SlurmCli(slurm_conf=str(self.conf_path), timeout=timeout)

    def export_line(self) -> str:
        return f"export SLURM_CONF={self.conf_path}"

    @property
    def network(self) -> ClusterNet | None:
        """The nodes' network namespaces and addresses: this object's, or those recorded under root (a fresh
        process, e.g. `python -m lamplighter.lab cluster restart-node`); None when the nodes share the host's."""
        if self.netns and self.base_port is not None:
            return ClusterNet(self.base_port, self.nodes)
        return recorded_network(self.root / "run")

    def node_address(self, name: str) -> str:
        """The node's NodeAddr: its own address with network namespaces, else localhost."""
        net = self.network
        return net.address(name) if net else "localhost"

    def node_netns(self, name: str) -> str | None:
        """The name of the node's network namespace (`ip netns`), or None when it shares the host's network."""
        net = self.network
        return net.netns(name) if net else None

    def node_argv(self, name: str, argv: list[str]) -> list[str]:
        """argv run in the node's network (its namespace, if it has one): for what runs "on" the node, such as
        its lamplighter daemon, which must reach slurmctld as the node's slurmd does. Same PID as argv's."""
        net = self.network
        return net.in_netns(name, argv) if net else argv

    def node_enter(self, name: str) -> list[str]:
        """The command prefix that runs a program on the node as it is now: in its slurmd's PID, mount and
        network namespaces, so that its /proc holds the node's processes only, as on a machine of its own.

        nsenter forks to enter a PID namespace, and does not pass signals on: the program is nsenter's one
        child, and is to be signalled itself. Raises ClusterError while the node is down (crashed, not yet
        restarted): there is no node to run on."""
        slurmd = self._slurmd(name)
        if slurmd is None:
            raise ClusterError(f"node {name} of the cluster under {self.root} is down")
        return ["nsenter", f"--target={slurmd}", "--pid", "--mount", "--net", "--uts", "--"]

    def host_pid(self, name: str, pid: int) -> int | None:
        """The host's PID of the process that is `pid` on node `name` (in its PID namespace), as a node's
        daemon reports it; None if no such process runs there."""
        rec = self._load_records().get(f"node-{name}")
        if rec is None or not is_alive(rec):
            return None
        for member in namespace_members(rec.pid):
            if ns_pid(PROC, member.pid) == pid:
                return member.pid
        return None

    def _slurmd(self, name: str) -> int | None:
        """The node's slurmd: the child of its recorded `unshare`; None while the node is down."""
        rec = self._load_records().get(f"node-{name}")
        below = children(PROC, rec.pid) if rec is not None and is_alive(rec) else []
        return below[0] if below else None

    # -- lifecycle ---------------------------------------------------------

    def up(self, timeout: float = 30.0) -> None:
        """Start munged, slurmctld and every node; return once all nodes are registered."""
        if self._load_records() and any(is_alive(r) for r in self._load_records().values()):
            raise ClusterError(f"a cluster already runs under {self.root}; run down() first")
        # A fresh cluster every time: old job state would confuse tests.
        shutil.rmtree(self.root / "state", ignore_errors=True)
        spool = self.root / "spool"
        if spool.is_symlink():  # the last up()'s link: rmtree refuses a link (and ignore_errors hid it)
            spool.unlink()
        shutil.rmtree(spool, ignore_errors=True)
        shutil.rmtree(self.sockets, ignore_errors=True)
        for sub in ("munge", "state", "run", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for sub in ("munge", "spool"):
            (self.sockets / sub).mkdir(parents=True, exist_ok=True)
        # The spool, where it can be found (the step daemons' sockets are in it).
        (self.root / "spool").symlink_to(self.sockets / "spool")
        # munged refuses a socket folder others can write to.
        os.chmod(self.sockets / "munge", 0o711)
        self._save_records({})
        self._remove_network()  # a crashed run's leftovers (only what it recorded)
        try:
            self._write_conf()
            if self.netns:
                self._make_network()
            self._start_munged()
            self._start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf_path)])
            wait_until(self._ctld_answers, timeout, f"slurmctld under {self.root} to answer")
            for name in self.node_names:
                self._start_node(name)
            self.wait_nodes_ready(timeout)
        except BaseException:
            self.down()
            raise

    def down(self, timeout: float = 10.0) -> None:
        """Stop everything this cluster started (also from a fresh process), by recorded PID."""
        recs = self._load_records()
        # Nodes first (their jobs die with them), then slurmctld, then munged.
        order = sorted(recs, key=lambda n: 0 if n.startswith("node-") else 1 if n == "slurmctld" else 2)
        for name in order:
            self._stop(recs[name], timeout)
        self._save_records({})
        self._popen.clear()
        first = self.first_job_id or self._conf_first_job_id()
        if first is not None:
            release_job_ids(first)
            self.first_job_id = None
        shutil.rmtree(self.sockets, ignore_errors=True)
        # Last: a namespace outlives its name while any of the node's processes is still in it.
        self._remove_network()

    def crash_node(self, name: str) -> None:
        """SIGKILL the node's namespace: slurmd, step daemons and job processes die at once.

        Returns once every process of the namespace is gone, not only `unshare` (its child slurmd dies of
        --kill-child after it, and the namespace's other processes after slurmd): a message slurmd sent in its last moment is then no longer on its way when the caller
        marks the node down (with ReturnToService=2, a registration after that returns a DOWN node)."""
        rec = self._record(f"node-{name}")
        members = namespace_members(rec.pid) if is_alive(rec) else []
        if is_alive(rec):
            os.kill(rec.pid, signal.SIGKILL)
        self._reap(rec)
        wait_until(lambda: not is_alive(rec), 10.0, f"node {name} (pid {rec.pid}) to die")
        wait_until(
            lambda: not any(is_alive(m) for m in members),
            10.0,
            f"every process of node {name}'s namespace to die",
        )

    def cut_node_link(self, name: str, cut: bool = True) -> None:
        """Take the node's link down (or up again): slurmd and its jobs live on, unreachable from the controller
        and every other node, as a node behind a failed switch port or too slow to answer. Needs netns."""
        net = self.network
        if net is None:
            raise ClusterError("cutting a node's link needs the cluster's network namespaces (netns=True)")
        subprocess.run(["ip", "link", "set", net.veth(name), "down" if cut else "up"], check=True, timeout=10)

    def silence_node(self, name: str, silent: bool = True) -> int:
        """Stop (SIGSTOP) or continue the node's slurmd alone: its step daemons and jobs live on, cut off
        from Slurm as by a partition. Returns slurmd's PID."""
        rec = self._record(f"node-{name}")
        slurmd = self._slurmd(name)
        if slurmd is None:
            raise ClusterError(f"node {name} (pid {rec.pid}) has no slurmd child")
        os.kill(slurmd, signal.SIGSTOP if silent else signal.SIGCONT)
        return slurmd

    def restart_node(self, name: str, timeout: float = 30.0) -> None:
        """Start a crashed or stopped node again and wait until it is registered."""
        key = f"node-{name}"
        recs = self._load_records()
        if key in recs and is_alive(recs[key]):
            raise ClusterError(f"node {name} still runs (pid {recs[key].pid}); crash_node it first")
        self._start_node(name)
        self.wait_nodes_ready(timeout, names=[name])

    def stop_controller(self, timeout: float = 10.0) -> None:
        """Stop slurmctld (SIGTERM: it saves its state), leaving the nodes and their jobs running."""
        self._stop(self._record("slurmctld"), timeout)
        recs = self._load_records()
        recs.pop("slurmctld", None)
        self._save_records(recs)

    def kill_controller(self, timeout: float = 10.0) -> None:
        """SIGKILL slurmctld, as a crash: it saves nothing on the way out; nodes and jobs go on."""
        rec = self._record("slurmctld")
        if is_alive(rec):
            os.kill(rec.pid, signal.SIGKILL)
        wait_until(lambda: self._reap(rec) or not is_alive(rec), timeout, f"slurmctld (pid {rec.pid}) to die")
        recs = self._load_records()
        recs.pop("slurmctld", None)
        self._save_records(recs)

    def start_controller(self, timeout: float = 30.0) -> None:
        """Start slurmctld again on its saved state and wait until it answers."""
        recs = self._load_records()
        if "slurmctld" in recs and is_alive(recs["slurmctld"]):
            raise ClusterError(f"slurmctld still runs (pid {recs['slurmctld'].pid})")
        self._start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf_path)])
        wait_until(self._ctld_answers, timeout, f"slurmctld under {self.root} to answer")

    def records(self) -> dict[str, ProcRecord]:
        """The daemons this cluster started and has not stopped, by name."""
        return self._load_records()

    def node_alive(self, name: str) -> bool:
        rec = self._load_records().get(f"node-{name}")
        return rec is not None and is_alive(rec)

    def wait_nodes_ready(self, timeout: float = 30.0, names: list[str] | None = None) -> list[NodeInfo]:
        """Wait until the nodes are registered and not DOWN (not for IDLE: a node may take a job at once)."""
        want = set(names or self.node_names)
        seen: list[NodeInfo] = []

        def ready() -> bool:
            nonlocal seen
            for name in want:
                self._check_started(f"node-{name}")
            try:
                seen = self.node_infos()
            except SlurmError:
                return False
            ok = {n.name for n in seen if n.name in want and n.registered and not n.is_down}
            return ok == want

        try:
            wait_until(ready, timeout, f"nodes {sorted(want)} to register")
        except ClusterError as e:
            states = ", ".join(f"{n.name}={n.state}" for n in seen) or "no answer"
            raise ClusterError(f"{e} (last seen: {states}; logs in {self.root / 'log'})") from None
        return seen

    def node_infos(self) -> list[NodeInfo]:
        return parse_scontrol_nodes(self.cli().run("scontrol", "-o", "show", "nodes"))

    def status(self) -> dict[str, object]:
        """Which recorded daemons are alive, for `python -m lamplighter.lab cluster status`."""
        return {name: {"pid": r.pid, "alive": is_alive(r)} for name, r in self._load_records().items()}

    def __enter__(self) -> TestCluster:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def ports(self) -> range:
        """The ports its Slurm daemons listen on (slurmctld's, then the nodes'), picked on the first ask: a port
        picked for a job must avoid them, since the nodes' port is bound only inside their networks."""
        # With namespaces the host holds slurmctld's port only; the nodes' one port is in their own networks.
        count = 2 if self.netns else self.nodes + 1
        if self.base_port is None:
            self.base_port = pick_port_range(count)
        return range(self.base_port, self.base_port + count)

    # -- internals ---------------------------------------------------------

    def _write_conf(self) -> None:
        base_port = self.ports().start
        if self.first_job_id is None:
            self.first_job_id = reserve_first_job_id()
        self.conf_path.write_text(
            render_slurm_conf(
                self.root,
                self.nodes,
                base_port,
                self.conf_overrides,
                first_job_id=self.first_job_id,
                sockets=self.sockets,
                network=self.network if self.netns else None,
            )
        )
        (self.root / "cgroup.conf").write_text(CGROUP_CONF)

    def _conf_first_job_id(self) -> int | None:
        """The FirstJobId of the slurm.conf under root (down() from a fresh process)."""
        try:
            lines = self.conf_path.read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            key, _, val = line.partition("=")
            if key == "FirstJobId" and val.strip().isdigit():
                return int(val)
        return None

    def _start_munged(self) -> None:
        m = self.root / "munge"
        key = m / "munge.key"
        if not key.exists():
            subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True, timeout=10)
        self._start(
            "munged",
            [
                "munged",
                "-F",
                "--force",
                f"--socket={self.sockets / 'munge' / 'sock'}",
                f"--key-file={key}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
        )
        sock = self.sockets / "munge" / "sock"
        wait_until(sock.exists, 10.0, f"munged socket {sock}")

    def _make_network(self) -> None:
        assert self.base_port is not None
        try:
            make_network(self.root / "run", ClusterNet(self.base_port, self.nodes))
        except NetworkError as e:
            raise ClusterError(f"node network of the cluster under {self.root}: {e}") from e

    def _remove_network(self) -> None:
        try:
            remove_network(self.root / "run")
        except NetworkError as e:
            raise ClusterError(f"node network of the cluster under {self.root}: {e}") from e

    @property
    def hosts_file(self) -> Path:
        """The /etc/hosts every node of a cluster with a node network sees (ClusterNet.hosts_text)."""
        return self.root / "run" / "hosts"

    def _start_node(self, name: str) -> None:
        # In the node's network namespace, if it has one (nsenter execs: the recorded PID is unshare's).
        slurmd = ["slurmd", "-D", "-N", name, "-f", str(self.conf_path)]
        unshare = ["unshare", "--pid", "--fork", "--mount", "--mount-proc", "--kill-child"]
        net = self.network
        if net is not None:
            # A machine of its own: its host name (UTS) resolves on every node to its address (the hosts file,
            # bound over /etc/hosts in its mount namespace only); sh execs slurmd, which stays unshare's child.
            keep_text(self.hosts_file, net.hosts_text(socket.gethostname()))
            setup = 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'
            argv = [*unshare, "--uts", "sh", "-c", setup, "sh", name, str(self.hosts_file), *slurmd]
        else:
            argv = [*unshare, *slurmd]
        self._start(f"node-{name}", self.node_argv(name, argv))

    def _ctld_answers(self) -> bool:
        self._check_started("slurmctld")
        try:
            self.cli(timeout=3).run("scontrol", "ping")
            return True
        except SlurmError:
            return False

    def _check_started(self, name: str) -> None:
        """Fail at once, with the log's tail, if a daemon we wait for has died."""
        rec = self._load_records().get(name)
        if rec is not None and not is_alive(rec):
            self._reap(rec)
            out = self.root / "log" / f"{name}.out"
            tail = out.read_text(errors="replace")[-1500:] if out.exists() else ""
            raise ClusterError(f"{name} (pid {rec.pid}) of the cluster under {self.root} died:\n{tail}")

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 - handed to the child
        try:
            env = dict(os.environ, SLURM_CONF=str(self.conf_path))
            # start_new_session: our terminal's Ctrl-C must not reach the cluster half-way.
            p = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True
            )
        finally:
            log.close()
        st = read_stat(PROC, p.pid)
        if st is None:
            raise ClusterError(f"{name} ({argv[0]}) exited at once; see {self.root / 'log' / (name + '.out')}")
        self._popen[name] = p
        recs = self._load_records()
        recs[name] = ProcRecord(name, p.pid, st.start_time)
        self._save_records(recs)

    def _stop(self, rec: ProcRecord, timeout: float) -> None:
        if not is_alive(rec):
            self._reap(rec)
            return
        if rec.name.startswith("node-"):
            # `unshare --fork` ignores SIGTERM: a clean stop is TERM to its child, slurmd.
            for child in children(PROC, rec.pid):
                os.kill(child, signal.SIGTERM)
        else:
            os.kill(rec.pid, signal.SIGTERM)
        try:
            wait_until(lambda: self._reap(rec) or not is_alive(rec), timeout, f"{rec.name} (pid {rec.pid}) to stop")
        except ClusterError:
            if is_alive(rec):
                os.kill(rec.pid, signal.SIGKILL)
            wait_until(lambda: self._reap(rec) or not is_alive(rec), 5.0, f"{rec.name} (pid {rec.pid}) to die")

    def _reap(self, rec: ProcRecord) -> bool:
        p = self._popen.get(rec.name)
        if p is not None and p.pid == rec.pid:
            return p.poll() is not None
        return False

    def _record(self, name: str) -> ProcRecord:
        recs = self._load_records()
        if name not in recs:
            raise ClusterError(f"{name} was not started by the cluster under {self.root}")
        return recs[name]

    def _load_records(self) -> dict[str, ProcRecord]:
        path = self.root / "run" / PROCS_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        return {k: ProcRecord(k, int(v["pid"]), int(v["start_ticks"])) for k, v in raw.items()}

    def _save_records(self, recs: dict[str, ProcRecord]) -> None:
        path = self.root / "run" / PROCS_FILE
        write_json_atomic(path, {k: {"pid": r.pid, "start_ticks": r.start_ticks} for k, r in recs.items()}, umask=True)

    def remove(self) -> None:
        """Delete the cluster folder (after down())."""
        shutil.rmtree(self.root, ignore_errors=True)


def slurm_installed() -> str | None:
    """None if the Slurm and munge programs are here, else what is missing."""
    missing = [
        p
        for p in ("slurmctld", "slurmd", "sbatch", "scontrol", "munged", "mungekey", "unshare")
        if shutil.which(p) is None
    ]
    return f"missing {', '.join(missing)} (apt-get install slurmctld slurmd slurm-client munge)" if missing else None


def reset_cluster(cluster: TestCluster, timeout: float = 30.0) -> None:
    """Back to all nodes up and idle with no jobs: for reusing one cluster across tests."""
    cli = cluster.cli()
    for entry in cli.run("squeue", "--noheader", "-o", "%i").split():
        try:
            cli.run("scancel", entry)
        except SlurmError:
            pass  # finished meanwhile
    reset_nodes(cluster, timeout)
    wait_until(lambda: not cli.run("squeue", "--noheader", "-o", "%i").split(), timeout, "the queue to empty")


def reset_nodes(cluster: TestCluster, timeout: float = 30.0) -> None:
    """Every node up and in service: a crashed one started again, a drained or down one resumed."""
    cli = cluster.cli()
    for name in cluster.node_names:
        if not cluster.node_alive(name):
            cluster.restart_node(name, timeout)
    for info in cluster.node_infos():
        if info.is_drained or info.is_down:
            try:
                cli.run("scontrol", "update", f"nodename={info.name}", "state=resume")
            except SlurmError:
                pass  # returned to service by itself meanwhile (ReturnToService=2)
    cluster.wait_nodes_ready(timeout)


@contextmanager
def running_cluster(
    root: Path, nodes: int = 3, conf: dict[str, str] | None = None, netns: bool = False
) -> Iterator[TestCluster]:
    """A started cluster that is stopped (by PID) on exit; the body of the repo-wide pytest fixture."""
    cluster = TestCluster(root, nodes, conf=conf, netns=netns)
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()
