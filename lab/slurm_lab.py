"""A whole lab on this machine: the Slurm test cluster, simulated GPUs per node, and what systemd would run.

On a real cluster systemd runs `lamplighter supervise` on every node
(Restart=always) and, on the head node, the Lighthouse service. Here
`ServiceRunner` plays systemd: it starts each service with its node's
environment (SLURMD_NODENAME, the node's gpusim folder, and
LAMPLIGHTER_SUPERVISOR_NODE so chaos can find a daemon without matching names)
and starts it again when it exits. Every PID it starts is recorded under the
lab folder; only those are ever signalled.

With a network namespace per node (LabSettings.netns, make scale's lab) a node
is a machine of its own: its daemon runs in its slurmd's namespaces (network,
PIDs, mounts), so its /proc holds the node's processes alone, it dies when the
node crashes, and it starts again once the node is back.

Tests and lab scripts get one through `running_lab(root, settings)`: up for a
block, down after it whatever happened.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lamplighter.configs.schema import HealthConfig, NodeHealthConfig, RestartConfig
from lamplighter.lab.testcluster import ClusterError, ProcRecord, TestCluster, pick_port_range, wait_until
from lamplighter.rundir.contract import ENV_JOB, write_json_atomic
from lamplighter.slurm.chaos.proc_find import ENV_SUPERVISOR_NODE, find_by_env
from lamplighter.system.procfs import PROC, children, read_stat

RESTART_DELAY_S = 0.5  # systemd's RestartSec


def daemon_argv(config: Path) -> list[str]:
    """How to start `lamplighter supervise --config FILE`."""
    return [sys.executable, "-m", "lamplighter", "supervise", "--config", str(config)]


@dataclass
class Service:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    # The command prefix that puts argv on its node at this start (TestCluster.node_enter): it forks, and the
    # service is its one child. Raises ClusterError while there is no node to run on; tried again later.
    enter: Callable[[], list[str]] | None = None
    proc: subprocess.Popen[bytes] | None = None
    record: ProcRecord | None = None
    starts: list[float] = field(default_factory=list)
    down_since: float | None = None


class ServiceRunner:
    """systemd's Restart=always for a few processes, in one thread."""

    def __init__(self, record_file: Path) -> None:
        self.services: dict[str, Service] = {}
        self.record_file = record_file
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, svc: Service) -> None:
        with self._lock:
            self.services[svc.name] = svc
            self._start(svc)

    def _start(self, svc: Service) -> None:
        svc.log.parent.mkdir(parents=True, exist_ok=True)
        argv, env = svc.argv, svc.env
        if svc.enter is not None:
            try:
                prefix = svc.enter()
            except ClusterError as e:
                svc.proc, svc.down_since = None, time.monotonic()
                with open(svc.log, "a") as log:
                    log.write(f"lab: {svc.name} not started: {e}\n")
                return
            # The environment goes to the service alone (env -i), not to the prefix: chaos finds a daemon by
            # its environment, and must find the daemon, not nsenter.
            argv = [*prefix, "env", "-i", *(f"{k}={v}" for k, v in svc.env.items()), *svc.argv]
            env = {"PATH": os.environ.get("PATH", os.defpath)}
        with open(svc.log, "ab") as log:
            svc.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True
            )
        st = read_stat(PROC, svc.proc.pid)
        svc.record = ProcRecord(svc.name, svc.proc.pid, st.start_time if st else 0)
        svc.starts.append(time.time())
        svc.down_since = None
        self._save()

    def _save(self) -> None:
        recs = {
            n: {"pid": s.record.pid, "start_ticks": s.record.start_ticks} for n, s in self.services.items() if s.record
        }
        write_json_atomic(self.record_file, recs, umask=True)

    def run(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="lab-services", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                for svc in self.services.values():
                    if svc.proc is not None and svc.proc.poll() is None:
                        continue
                    now = time.monotonic()
                    if svc.down_since is None:
                        svc.down_since = now
                    elif now - svc.down_since >= RESTART_DELAY_S and not self._stop.is_set():
                        self._start(svc)

    def pid(self, name: str) -> int | None:
        """The service's own process (below its prefix, if it has one), while it runs."""
        svc = self.services.get(name)
        own = self._own(svc) if svc is not None else []
        return own[0] if own else None

    @staticmethod
    def _own(svc: Service) -> list[int]:
        """The service's own process while it runs: its Popen's, or behind a prefix (nsenter) that one's child."""
        if svc.proc is None or svc.proc.poll() is not None:
            return []
        return children(PROC, svc.proc.pid) if svc.enter is not None else [svc.proc.pid]

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            for svc in self.services.values():
                for pid in self._own(svc):  # behind a prefix, the service itself: nsenter would leave it running
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for svc in self.services.values():
                if svc.proc is None:
                    continue
                try:
                    svc.proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    svc.proc.kill()
                    svc.proc.wait(5)


@dataclass
class LabSettings:
    compute_nodes: int = 4
    gpus_per_node: int = 8
    # The jobs' health and restart settings (lab_job_config); the daemons' node.yaml takes the node's part.
    health: HealthConfig = field(default_factory=HealthConfig)
    restart: RestartConfig = field(default_factory=RestartConfig)
    mode: str = "act"  # the daemons' node.yaml mode: act, or observe (decide and log, take no action)
    # Each node (its slurmd, jobs and lamplighter daemon) a machine of its own: its network namespace and address,
    # its host name resolving to that address on every node (TestCluster's netns), so that nothing passes because
    # two nodes share a loopback. Needs root and iproute2; False only where a test says why it shares one.
    netns: bool = True
    # slurm.conf lines replacing the lab's (testcluster_conf's overrides): e.g. SlurmdTimeout at Slurm's default.
    slurm_conf: dict[str, str] = field(default_factory=dict)


class SlurmLab:
    """Test cluster (head n1 + compute nodes), gpusim folder per node, node daemons; each job brings its Lighthouse."""

    def __init__(self, root: Path, settings: LabSettings | None = None) -> None:
        self.root = Path(root).resolve()
        self.settings = settings or LabSettings()
        self.cluster = TestCluster(
            self.root / "cluster",
            nodes=1 + self.settings.compute_nodes,
            netns=self.settings.netns,
            conf=self.settings.slurm_conf,
        )
        (self.root / "run").mkdir(parents=True, exist_ok=True)
        self.services = ServiceRunner(self.root / "run" / "services.json")
        self.gpusim_lib: Path | None = None
        self.daemons_started = False
        # A port of its own for its job's Lighthouse (lab_job_config's port): free when picked, none of Slurm's.
        self.job_port = self.new_job_port()

    def new_job_port(self) -> int:
        """A port for a job's Lighthouse on the head node: free now, and not one the cluster's Slurm will bind."""
        return pick_port_range(1, avoid=self.cluster.ports())

    @property
    def head(self) -> str:
        return self.cluster.node_names[0]

    @property
    def compute(self) -> list[str]:
        return self.cluster.node_names[1:]

    @property
    def gpusim_root(self) -> Path:
        return self.root / "gpus"

    @property
    def cluster_status_dir(self) -> Path:
        """Where the daemons publish their health (a shared folder on a real cluster)."""
        return self.root / "node-health"

    def node_dir(self, node: str) -> Path:
        return self.root / "daemon" / node

    def action_logs(self) -> list[Path]:
        """Whatever JSONL action logs the daemons wrote under their state folders."""
        return sorted(p for p in (self.root / "daemon").glob("**/*.jsonl") if "action" in p.name)

    def up(self, start_daemons: bool = True) -> None:
        self.cluster.up()
        try:
            from lamplighter.gpusim.build import ensure_built
            from lamplighter.gpusim.state import StateDir

            self.gpusim_lib = ensure_built().parent.parent
            for node in self.cluster.node_names:
                StateDir(self.gpusim_root / node).init(self.settings.gpus_per_node)
            if start_daemons:
                self.start_daemons()
            self.services.run()
        except BaseException:
            self.down()
            raise

    def node_config(self, node: str) -> dict[str, Any]:
        s = self.settings
        d = self.node_dir(node)
        cfg: dict[str, Any] = {
            "role": "head" if node == self.head else "compute",
            "node_name": node,
            "state_dir": str(d / "state"),
            "status_socket": str(d / "status.sock"),
            "cluster_status_dir": str(self.cluster_status_dir),
            "gpus": node != self.head,
            # The node's pace and GPU limits; the trainer thresholds and restart policy go with the job.
            "health": NodeHealthConfig(**s.health.model_dump(include=set(NodeHealthConfig.model_fields))).model_dump(
                mode="json"
            ),
            "metrics": {"enabled": False},
            "slurm_conf": str(self.cluster.conf_path),
            "max_drain_fraction": 0.5,
            "node_silence_s": 3.0,
            "mode": s.mode,
        }
        return cfg

    def node_env(self, node: str) -> dict[str, str]:
        from lamplighter.gpusim.build import sim_env

        assert self.gpusim_lib is not None
        env = sim_env(self.gpusim_lib, self.gpusim_root / node)
        env.update(
            {
                "SLURMD_NODENAME": node,
                ENV_SUPERVISOR_NODE: node,
                "SLURM_CONF": str(self.cluster.conf_path),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.pop(ENV_JOB, None)
        return env

    def start_daemons(self) -> None:
        """Start one daemon per node, as systemd would (restarted on exit)."""
        for node in self.cluster.node_names:
            d = self.node_dir(node)
            d.mkdir(parents=True, exist_ok=True)
            conf = d / "node.yaml"
            conf.write_text(yaml.safe_dump(self.node_config(node), sort_keys=False))
            log = d / "daemon.log"
            if self.settings.netns:
                # A node of its own: the daemon runs in its slurmd's namespaces (network, PIDs, mounts), sees only
                # the node's processes, dies with the node and comes back with it.
                enter = functools.partial(self.cluster.node_enter, node)
                svc = Service(f"supervise-{node}", daemon_argv(conf), self.node_env(node), log, enter=enter)
            else:
                svc = Service(f"supervise-{node}", daemon_argv(conf), self.node_env(node), log)
            self.services.add(svc)
        self.daemons_started = True

    def down(self) -> None:
        self.services.stop()
        self.cluster.down()

    def restart_node(self, node: str) -> None:
        """Bring a crashed node back (the hardware was repaired)."""
        self.cluster.restart_node(node)

    def wait_daemons_alive(self, timeout: float = 30.0) -> None:
        wait_until(
            lambda: all(self.services.pid(f"supervise-{n}") for n in self.cluster.node_names),
            timeout,
            "every node daemon to run",
        )


@contextmanager
def running_lab(
    root: Path, settings: LabSettings, daemons: bool = True, alive_timeout: float = 30.0
) -> Iterator[SlurmLab]:
    """The lab up for the block (with every node daemon running, when `daemons`), down after it whatever
    happened: the one way a test, a demo or a bench gets a lab."""
    lab = SlurmLab(root, settings)
    lab.up(start_daemons=daemons)
    try:
        if daemons:
            lab.wait_daemons_alive(alive_timeout)
        yield lab
    finally:
        lab.down()


def leftover_job_processes(job: str) -> list[int]:
    """PIDs of processes still carrying the job's name in their environment (trainers, batch shells)."""
    return [p.pid for p in find_by_env(lambda e: e.get(ENV_JOB) == job)]
