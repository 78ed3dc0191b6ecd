"""`lamplighter supervise` on the real local Slurm cluster with simulated GPUs (slow: integration).

Each test starts its own daemons (one per node name: the cluster's nodes
share this machine's kernel, see node_trainers.py) with fresh state, and
prints the latencies it saw; tests assert behaviour, never timing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from realparts import NotifySocket, require_netns, require_slurm, wait_for

from lamplighter.configs.schema import JobConfig
from lamplighter.gpusim.build import ensure_built
from lamplighter.lab.testcluster import TestCluster, reset_cluster, running_cluster
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.submit.render import render_job
from lamplighter.supervisor.health_report import read_reports
from lamplighter.supervisor.status_socket import StatusError, read_status

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent
NODES = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    require_slurm()
    with running_cluster(tmp_path_factory.mktemp("daemon-cluster"), nodes=NODES) as c:
        yield c


@pytest.fixture(scope="module")
def gpusim_lib() -> Path:
    return ensure_built().parent.parent  # ROCM_PATH: the folder holding lib/libamd_smi.so


class Daemons:
    """The supervise daemons of one test; stopped (by PID) at the end."""

    def __init__(self, root: Path, cluster: TestCluster, lib: Path) -> None:
        self.root, self.cluster, self.lib = root, cluster, lib
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def gpusim(self, node: str) -> Path:
        d = self.root / "gpusim" / node
        if not d.exists():
            self._gpusim("init", "--dir", str(d), "--gpus", "2")
        return d

    def _gpusim(self, *args: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "lamplighter", "gpusim", *args],
            check=True,
            capture_output=True,
            timeout=30,
        )

    def inject(self, node: str, gpu: int, fault: str, count: int) -> None:
        self._gpusim(
            "inject", "--dir", str(self.gpusim(node)), "--gpu", str(gpu), "--fault", fault, "--count", str(count)
        )

    def config(self, name: str, **extra: Any) -> Path:
        cfg = {
            "node_name": name,
            "state_dir": str(self.root / "state" / name),
            "status_socket": str(self.root / "sock" / f"{name}.sock"),
            "cluster_status_dir": str(self.health_dir),
            "slurm_conf": str(self.cluster.conf_path),
            "metrics": {"enabled": False},
            "max_drain_fraction": 0.5,
            "gpus": True,
            "health": {"poll_interval_s": 0.5, "probe_deadline_s": 1.0},
            **extra,
        }
        path = self.root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    @property
    def health_dir(self) -> Path:
        return self.root / "health"

    def health(self, name: str) -> dict[str, Any]:
        return {k: v.to_json() for k, v in read_reports(self.health_dir, time.time()).items()}.get(name, {})

    def sock(self, name: str) -> Path:
        return self.root / "sock" / f"{name}.sock"

    def start(
        self, name: str, env_extra: dict[str, str] | None = None, args: list[str] | None = None, **extra: Any
    ) -> None:
        cfg = self.config(name, **extra)
        env = dict(
            os.environ,
            SLURM_CONF=str(self.cluster.conf_path),
            ROCM_PATH=str(self.lib),
            LAMPLIGHTER_GPUSIM_DIR=str(self.gpusim(name)),
            **(env_extra or {}),
        )
        log = open(self.root / f"daemon-{name}.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            self.procs[name] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lamplighter",
                    "supervise",
                    "--config",
                    str(cfg),
                    *(args or []),
                ],
                stdout=log,
                stderr=log,
                env=env,
            )
        finally:
            log.close()

    def status(self, name: str) -> dict[str, Any]:
        try:
            return read_status(self.sock(name), timeout=5)
        except StatusError:
            return {}

    def wait_ready(self, name: str, gpus: bool = True) -> None:
        def ready() -> bool:
            p = self.procs[name]
            assert p.poll() is None, f"daemon {name} exited {p.returncode}: {self.log(name)[-2000:]}"
            st = self.status(name)
            return bool(st.get("cycles")) and (not gpus or all(g["status"] == "ok" for g in st.get("gpus", [])))

        wait_for(ready, 60, f"daemon {name} ready")

    def trainer_pid(self, name: str, job_id: int) -> int:
        def find() -> int | None:
            for t in self.status(name).get("trainers", []):
                if t["job_id"] == str(job_id):
                    return int(t["pid"])
            return None

        return int(wait_for(find, 30, f"daemon {name} to adopt job {job_id}"))

    def log(self, name: str) -> str:
        return (self.root / f"daemon-{name}.log").read_text(errors="replace")

    def actions(self, name: str) -> list[dict[str, Any]]:
        path = self.root / "state" / name / "actions.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        p = self.procs[name]
        if p.poll() is None:
            p.send_signal(sig)
        p.wait(timeout=30)

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


@pytest.fixture
def daemons(cluster: TestCluster, gpusim_lib: Path, tmp_path: Path) -> Iterator[Daemons]:
    reset_cluster(cluster)
    d = Daemons(tmp_path, cluster, gpusim_lib)
    try:
        yield d
    finally:
        d.stop_all()
        reset_cluster(cluster)


@pytest.fixture(scope="module")
def slow_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    """SlurmdTimeout at Slurm's default: within a test, Slurm itself marks no silent node down, so what the head
    does is the head's alone (with the lab's 3 s, Slurm races it); a network per node, for cutting one's link."""
    require_slurm()
    require_netns()
    conf = {"SlurmdTimeout": "300"}
    with running_cluster(tmp_path_factory.mktemp("slow-cluster"), nodes=NODES, conf=conf, netns=True) as c:
        yield c


@pytest.fixture
def slow_daemons(slow_cluster: TestCluster, gpusim_lib: Path, tmp_path: Path) -> Iterator[Daemons]:
    reset_cluster(slow_cluster, timeout=60)
    d = Daemons(tmp_path, slow_cluster, gpusim_lib)
    try:
        yield d
    finally:
        d.stop_all()
        reset_cluster(slow_cluster, timeout=60)


def submit_group(
    cluster: TestCluster, root: Path, exclude: str | None = None, spare: bool = False, in_job: int = 0
) -> tuple[int, Path]:
    """One group of the stand-in trainer; `in_job` 0 (default): every failure is the node daemon's to requeue."""
    job_name = f"t{uuid.uuid4().hex[:6]}"
    run_dir = root / f"run-{job_name}"
    job = JobConfig(
        name=job_name,
        run_dir=str(run_dir),
        groups={"count": 1},
        trainer={"command": ["{python}", str(HERE / "daemon_trainer.py")]},
        slurm={"extra_sbatch": [f"--exclude={exclude}"] if exclude else [], "spare": spare, "head_node": "n1"},
        # The job's own thresholds and restart policy reach the daemons through its job.json. The stand-in
        # trainer has no Lighthouse: progress from its heartbeat files only; torchft waits below the hang timeout.
        health={"progress": "heartbeat", "hang_timeout_s": 3.0, "startup_timeout_s": 30.0},
        restart={"budget_per_group": 5, "in_job": in_job, "standby_preload": ["json"]},
        torchft={"timeout_s": 2, "quorum_timeout_s": 2, "pg_timeout_s": 1, "connect_timeout_s": 2},
        lighthouse={"host": "n1", "port": 29597},  # no Lighthouse is started: the fixed address stands in for one
    )
    scripts = render_job(job, root / f"scripts-{job_name}", python=sys.executable)
    return SlurmActions(cluster.cli()).submit(scripts[-1]), run_dir


def running_on(api: SlurmActions, job_id: int, restarts: int | None = None) -> str | None:
    info = api.job(job_id)
    if info.state == "RUNNING" and (restarts is None or info.restarts == restarts):
        return info.node_list
    return None


def start_all(d: Daemons, cluster: TestCluster, **kw: Any) -> None:
    for n in cluster.node_names:
        d.start(n, **kw)
    for n in cluster.node_names:
        d.wait_ready(n)


def test_gpu_fault_drains_node_and_moves_job(daemons: Daemons, cluster: TestCluster) -> None:
    api = SlurmActions(cluster.cli())
    start_all(daemons, cluster)
    job, run_dir = submit_group(cluster, daemons.root)
    node = wait_for(lambda: running_on(api, job), 30, "job running")
    daemons.trainer_pid(node, job)
    # The daemon publishes its health for `lamplighter status` / `nodes` on other machines.
    wait_for(lambda: daemons.health(node).get("trainers") == 1, 30, f"{node}'s health report with its trainer")
    assert daemons.health(node)["health"] == "ok" and daemons.health(node)["gpus"] == {"ok": 2}
    t0 = time.monotonic()
    daemons.inject(node, 1, "ecc-uncorrectable", 2)
    info = wait_for(lambda: (n := api.node(node)).is_drained and n, 30, f"{node} drained")
    t_drain = time.monotonic() - t0
    report = wait_for(lambda: (h := daemons.health(node)).get("health") == "gpu-fault" and h, 30, "gpu-fault report")
    assert any("uncorrectable ECC +2" in p for p in report["problems"])
    listed = subprocess.run(
        [sys.executable, "-m", "lamplighter", "nodes", "--cluster-status-dir", str(daemons.health_dir)],
        env=dict(os.environ, SLURM_CONF=str(cluster.conf_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    drained_line = next(line for line in listed.stdout.splitlines() if line.strip().startswith(node + " "))
    assert "lamplighter: GPU 1" in drained_line
    assert any(line.strip().startswith(node) and "gpu-fault" in line for line in listed.stdout.splitlines())
    assert info.reason.startswith("lamplighter: GPU 1"), info.reason
    assert "uncorrectable ECC +2" in info.reason
    other = wait_for(lambda: (n := running_on(api, job, 1)) and n != node and n, 30, "job running elsewhere")
    t_run = time.monotonic() - t0
    assert other != node
    wait_for(lambda: (run_dir / "starts" / "0-100.json").exists(), 30, "attempt 1 started")
    kinds = [a["action"] for a in daemons.actions(node)]
    assert kinds == ["kill_local", "drain", "requeue"], kinds
    # The trainer step killed; srun left to end with it and the batch step stopped, for the requeue to end:
    # killed first, they held the job COMPLETING ~2.3 s longer (slurmstepd retrying a dead srun).
    kill = daemons.actions(node)[0]["result"]
    assert kill["killed"] and kill["srun_left_to_end"] and kill["batch_step_stopped"], kill
    print(f"\nGPU fault on {node}: drained after {t_drain:.2f} s, job running on {other} after {t_run:.2f} s")


@pytest.mark.parametrize("fault", ["crash", "hang"])
def test_trainer_failure_requeues(daemons: Daemons, cluster: TestCluster, fault: str) -> None:
    api = SlurmActions(cluster.cli())
    start_all(daemons, cluster)
    job, run_dir = submit_group(cluster, daemons.root)
    node = wait_for(lambda: running_on(api, job), 30, "job running")
    pid = daemons.trainer_pid(node, job)
    # The daemon judges the job by the job's own settings (its job.json), not by node.yaml.
    [watch] = [j for j in daemons.status(node)["jobs"] if Path(j["run_dir"]) == run_dir]
    assert watch["config"] == str(run_dir / "job.json") and watch["config_error"] is None, watch
    assert (watch["progress"], watch["hang_timeout_s"]) == ("heartbeat", 3.0), watch
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL if fault == "crash" else signal.SIGSTOP)
    other = wait_for(lambda: running_on(api, job, 1), 60, "job requeued and running")
    wait_for(lambda: (run_dir / "starts" / "0-100.json").exists(), 30, "attempt 1 started")
    t_run = time.monotonic() - t0
    assert api.job(job).restarts == 1
    requeues = [a for a in daemons.actions(node) if a["action"] == "requeue"]
    assert len(requeues) == 1 and requeues[0]["outcome"] == "ok", requeues
    assert requeues[0]["observation"]["type"] == ("exit" if fault == "crash" else "hang")
    assert not api.node(node).is_drained
    # The same lines are in the job's (shared) run directory, and `lamplighter why` answers from them.
    why = subprocess.run(
        [sys.executable, "-m", "lamplighter", "why", str(run_dir), "--run-dir", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    [group] = json.loads(why.stdout)["groups"]
    [attempt0] = group["attempts"]
    assert attempt0["attempt"] == 0 and [a["action"] for a in attempt0["actions"]][-1] == "requeue", group
    assert attempt0["actions"][-1]["node"] == node and attempt0["actions"][-1]["id"] == requeues[0]["id"]
    print(f"\ntrainer {fault} on {node}: job running again on {other} after {t_run:.2f} s")


def test_a_killed_trainer_restarts_in_its_warm_spare_inside_the_job(daemons: Daemons, cluster: TestCluster) -> None:
    """slurm.spare and restart.in_job: the group's own agent keeps a spare step in the job's allocation, and a
    killed trainer's place goes to it: no requeue, no action of any daemon; the spare is in the job's own
    step cgroup, as the job's user (the kernel says so)."""
    api = SlurmActions(cluster.cli())
    start_all(daemons, cluster)
    job, run_dir = submit_group(cluster, daemons.root, spare=True, in_job=2)
    node = wait_for(lambda: running_on(api, job), 30, "job running")
    pid = daemons.trainer_pid(node, job)
    journal = run_dir / "injob" / "g0.jsonl"
    spare = wait_for(lambda: journal.exists() and '"spare"' in journal.read_text(), 30, "the spare step started")
    assert spare
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (run_dir / "starts" / "0-1.json").exists(), 30, "the trainer of in-job restart 1")

    def new_trainer() -> dict[str, Any] | None:
        return next((t for t in daemons.status(node).get("trainers", []) if t["step"] != "0"), None)

    trainer = wait_for(new_trainer, 30, "the daemon to watch the trainer in the spare's step")
    cgroup = Path(f"/proc/{trainer['pid']}/cgroup").read_text()
    assert f"/job_{job}/step_{trainer['step']}" in cgroup  # the spare's step, in the job's own cgroup
    events = [json.loads(x) for x in journal.read_text().splitlines()]
    assert [e["how"] for e in events if e["event"] == "started"] == ["cold", "warm"]
    cycles = daemons.status(node).get("cycles", 0)
    wait_for(lambda: daemons.status(node).get("cycles", 0) >= cycles + 4, 30, "a few more daemon cycles")
    assert api.job(job).restarts == 0 and api.job(job).state == "RUNNING"
    assert [a["action"] for a in daemons.actions(node)] == []
    assert "restarted in the job, nothing to do" in daemons.log(node)


def test_with_no_daemon_left_the_in_job_agent_still_restarts_a_killed_trainer(
    daemons: Daemons, cluster: TestCluster
) -> None:
    """deploy/README (uninstall, a daemon down everywhere): the in-job agents keep restarting trainers inside
    their allocation, up to restart.in_job; nothing requeues from outside. No daemon runs in this test."""
    api = SlurmActions(cluster.cli())
    job, run_dir = submit_group(cluster, daemons.root, in_job=2)
    first = run_dir / "starts" / "0-0.json"
    wait_for(first.exists, 30, "the trainer started")
    start = json.loads(first.read_text())  # its PID as its node's PID namespace numbers it
    pid = wait_for(lambda: cluster.host_pid(start["node"], start["pid"]), 10, "the trainer's PID on the host")
    os.kill(pid, signal.SIGKILL)
    again = wait_for(lambda: (p := run_dir / "starts" / "0-1.json").exists() and p, 30, "in-job restart 1")
    assert json.loads(again.read_text())["attempt"] == 1
    assert api.job(job).state == "RUNNING" and api.job(job).restarts == 0  # the same allocation, not requeued
    journal = [json.loads(x) for x in (run_dir / "injob" / "g0.jsonl").read_text().splitlines()]
    assert [e["how"] for e in journal if e["event"] == "started"] == ["cold", "cold"]
    assert not daemons.procs


@pytest.mark.heavy(seconds=20)
def test_head_marks_down_a_crashed_node_holding_only_its_group_and_leaves_another_tenants_to_slurm(
    slow_daemons: Daemons, slow_cluster: TestCluster
) -> None:
    """Two crashed nodes: one holds only a lamplighter group, and after agreeing probes the head marks it DOWN
    (nobody else's job is there; a requeue on a node Slurm believes up would wait in COMPLETING for
    SlurmdTimeout) and its group runs elsewhere; the other holds another tenant's job only, and is Slurm's."""
    daemons, cluster = slow_daemons, slow_cluster
    api = SlurmActions(cluster.cli())
    daemons.start("head", role="head", gpus=False, node_silence_s=1.0)
    daemons.wait_ready("head", gpus=False)
    # The plain job's node is kept out of the lamplighter job's reach: Slurm would otherwise requeue
    # it onto that (dead, not yet noticed) node.
    plain = daemons.root / "plain.sh"
    plain.write_text(
        f"#!/bin/bash\n#SBATCH --job-name=plain\n#SBATCH --requeue\n"
        f"#SBATCH --output={daemons.root}/plain-%j.out\nexec srun sleep 600\n"
    )
    other_job = api.submit(plain)
    node_b = wait_for(lambda: running_on(api, other_job), 30, "plain job running")
    job, _ = submit_group(cluster, daemons.root, exclude=node_b)
    node_a = wait_for(lambda: running_on(api, job), 30, "lamplighter job running")
    cluster.crash_node(node_a)
    cluster.crash_node(node_b)
    wait_for(lambda: (n := running_on(api, job, 1)) and n != node_a, 60, "the group running elsewhere")
    a = api.node(node_a)
    assert a.is_down and (a.reason or "").startswith("lamplighter: slurmd on"), (a.state, a.reason)
    assert "every job Slurm has on it is a lamplighter group's" in (a.reason or "")
    acts = daemons.actions("head")
    assert [(x["action"], x["target"]) for x in acts][:1] == [("mark_down", node_a)], acts
    # The other tenant's dead node: lamplighter does nothing to it (their job is Slurm's to requeue).
    assert all(x["target"] != node_b for x in acts), acts
    assert not api.node(node_b).is_down and running_on(api, other_job, 0) == node_b


@pytest.mark.heavy(seconds=30)
def test_a_silent_node_shared_with_another_tenant_is_drained_never_marked_down_and_their_job_runs_on(
    slow_daemons: Daemons, slow_cluster: TestCluster
) -> None:
    """A node cut off (its link down: slurmd and its jobs alive, unreachable) holding a lamplighter group and
    another user's job: the head drains the node and moves the group, and the other user's job keeps running
    there, untouched."""
    d, slow = slow_daemons, slow_cluster
    api = SlurmActions(slow.cli())
    d.start("head", role="head", gpus=False, node_silence_s=1.0)
    d.wait_ready("head", gpus=False)
    shared = "n2"
    plain = d.root / "plain.sh"
    plain.write_text(
        f"#!/bin/bash\n#SBATCH --job-name=plain\n#SBATCH --nodelist={shared}\n#SBATCH --ntasks=1\n"
        f"#SBATCH --output={d.root}/plain-%j.out\nexec sleep 600\n"
    )
    theirs = api.submit(plain)
    wait_for(lambda: running_on(api, theirs) == shared, 30, "the other tenant's job running on n2")
    job, _ = submit_group(slow, d.root, exclude="n1,n3,n4")
    wait_for(lambda: running_on(api, job) == shared, 30, "the group running beside it")
    assert {j.job_id for j in api.jobs_on(shared)} == {theirs, job}  # squeue -w, every user's
    slow.cut_node_link(shared)
    try:
        wait_for(lambda: api.node(shared).is_drained, 30, "the head's drain of the silent node")
        wait_for(lambda: api.job(job).restarts == 1, 30, "the group requeued")
    finally:
        slow.cut_node_link(shared, cut=False)
    # The requeue's line is written once Slurm has the job back, which the cut link held up.
    wait_for(lambda: "requeue" in [a["action"] for a in d.actions("head")], 60, "the head's requeue done")
    kinds = [a["action"] for a in d.actions("head")]
    assert "mark_down" not in kinds and kinds[:2] == ["drain", "requeue"], kinds
    assert not api.node(shared).is_down
    assert running_on(api, theirs, 0) == shared  # never requeued, never killed


def test_daemon_killed_mid_recovery_completes_once(daemons: Daemons, cluster: TestCluster) -> None:
    api = SlurmActions(cluster.cli())
    job_a, run_a = submit_group(cluster, daemons.root)
    job_b, _ = submit_group(cluster, daemons.root)
    node_a = wait_for(lambda: running_on(api, job_a), 30, "job A running")
    node_b = wait_for(lambda: running_on(api, job_b), 30, "job B running")
    pause = daemons.root / "paused"
    notify = NotifySocket()  # node B's daemon's systemd
    try:
        for n in cluster.node_names:
            flags = ["--test-pause-before", "requeue", "--test-pause-file", str(pause)]
            sd = {"NOTIFY_SOCKET": notify.name} if n == node_b else None
            daemons.start(n, args=flags if n == node_a else None, env_extra=sd)
        for n in cluster.node_names:
            daemons.wait_ready(n)
        # READY=1 only once the trainers running before the daemon started are adopted: its STATUS says so.
        ready = wait_for(lambda: notify.message_with("READY=1"), 30, f"READY=1 from {node_b}'s daemon")
    finally:
        notify.close()
    [said] = [line for line in ready if line.startswith("STATUS=")]
    m = re.fullmatch(rf"STATUS=compute supervisor for {node_b}, (\d+) processes of lamplighter jobs adopted", said)
    assert m is not None and int(m.group(1)) >= 1, ready
    pid_a = daemons.trainer_pid(node_a, job_a)
    pid_b = daemons.trainer_pid(node_b, job_b)
    os.kill(pid_a, signal.SIGKILL)
    wait_for(pause.exists, 30, "the daemon to journal the requeue and pause")
    assert api.job(job_a).restarts == 0  # journaled, not done
    daemons.kill(node_a)  # SIGKILL in the middle of the recovery
    daemons.start(node_a)
    wait_for(lambda: running_on(api, job_a, 1), 60, "job A requeued by the restarted daemon")
    wait_for(lambda: (run_a / "starts" / "0-100.json").exists(), 30, "attempt 1 started")
    cycles = daemons.status(node_a).get("cycles", 0)
    wait_for(lambda: daemons.status(node_a).get("cycles", 0) >= cycles + 6, 30, "a few more cycles")
    assert api.job(job_a).restarts == 1
    requeues = [a for a in daemons.actions(node_a) if a["action"] == "requeue"]
    assert [(a.get("recovered", False), a["outcome"]) for a in requeues] == [(True, "ok")], requeues
    st = daemons.status(node_a)
    assert list(st["restarts"].values()) == [1], st["restarts"]
    assert not st["pending"]
    # The other job's trainer was never touched.
    assert api.job(job_b).restarts == 0 and api.job(job_b).state == "RUNNING"
    assert Path(f"/proc/{pid_b}").exists()
