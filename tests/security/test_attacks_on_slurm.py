"""The attacks of issue 27 on the real test cluster, as a second, unprivileged user: each one refused.

One Slurm lab (a head and two compute nodes, `lamplighter supervise` on each, as root, as systemd would run
it). The victim is a lamplighter group job of another user (root's here: the lab's interpreter lives under
/root, which an ordinary user cannot run, so every job of the tenant below is plain bash). The evidence is
read from Slurm (the victim's restart count and state), from the kernel (the victim's processes, by pid and
start time; files that must not exist) and from the daemons (their status, action logs and log lines).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Tenant
from realparts import require_slurm, wait_for

from lamplighter.configs.schema import HealthConfig, JobConfig
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab, running_lab
from lamplighter.rundir.contract import RunPaths
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.step_cgroup import parse_cgroup
from lamplighter.slurm.submit.render import render_job
from lamplighter.supervisor.status_socket import StatusError, read_status
from lamplighter.system import procfs

pytestmark = pytest.mark.integration
TRAINER = Path(__file__).resolve().parents[1] / "daemon_slurm" / "daemon_trainer.py"
EXIT_GRACE_S = 10.0  # ComputeLoop.exit_grace_s: how long an exit of a running job waits before a requeue


@pytest.fixture(scope="module")
def lab() -> Iterator[SlurmLab]:
    require_slurm()
    root = Path(tempfile.mkdtemp(prefix="ll-security-"))
    root.chmod(0o755)  # the tenant's sbatch reads the cluster's slurm.conf and reaches its munge socket
    try:
        with running_lab(root, LabSettings(compute_nodes=2, health=HealthConfig(poll_interval_s=0.5))) as lab:
            for node in lab.cluster.node_names:
                wait_for(lambda n=node: status(lab, n).get("cycles"), 60, f"daemon of {node} cycling")
            yield lab
    finally:
        shutil.rmtree(root, ignore_errors=True)


def status(lab: SlurmLab, node: str) -> dict[str, Any]:
    try:
        return read_status(lab.node_dir(node) / "status.sock", timeout=5)
    except StatusError:
        return {}


def cycles_later(lab: SlurmLab, node: str, n: int, timeout: float = 120) -> None:
    """The node's daemon went through n more whole cycles (its loop was not stalled)."""
    start = status(lab, node).get("cycles", 0)
    wait_for(lambda: status(lab, node).get("cycles", 0) >= start + n, timeout, f"{n} more cycles of {node}'s daemon")


def daemon_log(lab: SlurmLab, node: str) -> str:
    return (lab.node_dir(node) / "daemon.log").read_text(errors="replace")


def node_actions(lab: SlurmLab, node: str) -> list[dict[str, Any]]:
    path = lab.node_dir(node) / "state" / "actions.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


class Victim:
    """Another user's lamplighter group job (one stand-in trainer), on a compute node, not exclusive."""

    def __init__(self, lab: SlurmLab, name: str, progress: str = "heartbeat") -> None:
        self.lab = lab
        self.api = SlurmActions(lab.cluster.cli())
        base = Path(tempfile.mkdtemp(prefix=f"ll-victim-{name}-"))
        base.chmod(0o755)
        self.base = base
        self.run_dir = base / "run"
        job = JobConfig(
            name=name,
            run_dir=str(self.run_dir),
            groups={"count": 1},
            trainer={"command": ["{python}", str(TRAINER)]},
            health={"progress": progress, "hang_timeout_s": 3.0, "startup_timeout_s": 30.0},
            restart={"standby_preload": ["json"]},
            torchft={"timeout_s": 2, "quorum_timeout_s": 2, "pg_timeout_s": 1, "connect_timeout_s": 2},
            lighthouse={"host": lab.head, "port": 29597},  # no Lighthouse is started: a fixed address stands in
            slurm={
                "slurm_conf": str(lab.cluster.conf_path),
                "extra_sbatch": [f"--exclude={lab.head}"],
                "head_node": lab.head,
            },
        )
        script = render_job(job, base / "scripts", python=sys.executable)[-1]
        # A run directory others may write to, as the old deploy/README advised for root_squash.
        self.run_dir.chmod(0o777)
        self.job_id = self.api.submit(script)
        self.node = str(
            wait_for(lambda: (i := self.api.job(self.job_id)).running and i.node_list, 30, "victim running")
        )
        self.trainer = wait_for(self._trainer, 30, "the victim's trainer adopted by its node's daemon")

    def _trainer(self) -> tuple[int, int] | None:
        for t in status(self.lab, self.node).get("trainers", []):
            if t["job_id"] == str(self.job_id) and t["root"]:
                # The daemon runs on its node, a machine of its own: it names the PID of the node's namespace.
                pid = self.lab.cluster.host_pid(self.node, int(t["pid"]))
                st = procfs.read_stat(procfs.PROC, pid) if pid is not None else None
                return (pid, st.start_time) if pid is not None and st else None
        return None

    def alive(self) -> bool:
        return procfs.same_process(procfs.PROC, *self.trainer)

    def close(self) -> None:
        try:
            self.api.cancel(self.job_id)
        except Exception:
            pass
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def victim(lab: SlurmLab, request: pytest.FixtureRequest) -> Iterator[Victim]:
    # The victim reads its Lighthouse too where a test looks at where that is read from.
    progress = "auto" if "lighthouse" in request.node.name else "heartbeat"
    v = Victim(lab, f"v{abs(hash(request.node.name)) % 10**6}", progress)
    try:
        yield v
    finally:
        v.close()


def sbatch_as(tenant: Tenant, lab: SlurmLab, name: str, body: str, *opts: str) -> int:
    """Submit a plain bash job as the tenant; its job id."""
    script = tenant.write(f"{name}.sh", "#!/bin/bash\n" + body + "\n", 0o755)
    out = tenant.run(
        ["sbatch", "--parsable", f"--job-name={name}", f"--output={tenant.home}/{name}-%j.out", *opts, str(script)],
        env={"SLURM_CONF": str(lab.cluster.conf_path)},
    )
    return int(out.stdout.strip().split(";")[0])


def gone_from_queue(api: SlurmActions, job_id: int) -> bool:
    return api.job(job_id).state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")


PY_AS_TENANT = "/usr/bin/python3"  # the system's interpreter: the tenant's own tools, nothing of lamplighter's


def test_a_user_outside_any_job_gets_no_process_from_any_lamplighter_service(lab: SlurmLab, tenant: Tenant) -> None:
    """The old warm-standby service handed any local user a process outside Slurm. Now no lamplighter service
    serves users: every Unix socket the node daemons listen on is tried as the tenant, with the old standby
    request, and the kernel shows no process of the tenant's anywhere but in its own commands."""
    daemons = [p for n in lab.cluster.node_names if (p := lab.services.pid(f"supervise-{n}")) is not None]
    # The sockets the daemons listen on: as many as the socket files in their folders (a socket is bound under
    # a temporary name and renamed, so /proc/net/unix keeps the old name: the files are found on disk).
    sockets = sorted(str(f) for f in (lab.root / "daemon").rglob("*") if f.is_socket())
    assert len(sockets) == len(listening_unix_inodes(daemons)) == len(daemons), sockets
    request = json.dumps({"argv": ["python3", "-c", "import time; time.sleep(60)"], "env": {}, "cwd": "/"})
    probe = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.settimeout(3)\n"
        "try:\n"
        "    s.connect(sys.argv[1]); s.sendall(sys.argv[2].encode() + b'\\n'); print('answered', s.recv(200))\n"
        "except OSError as e:\n"
        "    print('refused', e)\n"
    )
    outcomes = {}
    for path in [*sockets, "/run/lamplighter-standby/standby.sock"]:
        outcomes[path] = tenant.run([PY_AS_TENANT, "-c", probe, path, request]).stdout.strip()
    print("\n".join(f"{p}: {o}" for p, o in outcomes.items()))
    assert all(o.startswith("refused") for o in outcomes.values()), outcomes
    # Kernel: no process of the tenant's below a lamplighter service (its own jobs of the other tests here,
    # below slurmstepd, may run meanwhile: tests run side by side).
    snap = procfs.snapshot(procfs.PROC)
    below = {p.pid for d in daemons for p in procfs.tree(snap, d)}
    mine = [pid for pid in below if procfs.read_uid(procfs.PROC, pid) == tenant.uid]
    assert mine == [], [procfs.read_cmdline(procfs.PROC, p) for p in mine]
    # And the service that did it is gone from the product: no such command.
    gone = subprocess.run([sys.executable, "-m", "lamplighter", "standby", "--help"], capture_output=True, text=True)
    assert gone.returncode == 2 and "invalid choice: 'standby'" in gone.stderr


def listening_unix_inodes(pids: list[int]) -> set[str]:
    """Inodes of the listening Unix sockets these processes (and their children) hold."""
    listening = set()
    # Each daemon's own network namespace (a lab node's): /proc/PID/net/unix lists that namespace's sockets.
    for table in {procfs.PROC / str(pid) / "net" / "unix" for pid in pids}:
        for line in table.read_text().splitlines()[1:]:
            f = line.split()
            if len(f) >= 7 and f[3] == "00010000":  # __SO_ACCEPTCON: a listening socket
                listening.add(f[6])
    held = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        todo += procfs.children(procfs.PROC, pid)
        for fd in (procfs.PROC / str(pid) / "fd").glob("*"):
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in listening:
                held.add(target[8:-1])
    return held


def test_a_forged_environment_gets_no_kill_requeue_or_settings(lab: SlurmLab, tenant: Tenant, victim: Victim) -> None:
    """The tenant's processes carry the victim's job id, name, group, attempt, run dir and a config of their
    own: one in the tenant's own job, on the victim's node, and one in no job at all. They end badly; the
    victim's job is not requeued, its trainer not killed, its settings not replaced."""
    evil = JobConfig(
        name=victim.run_dir.name,
        health={"progress": "heartbeat", "hang_timeout_s": 5.0, "startup_timeout_s": 5.0},
        restart={"budget_per_group": 0, "in_job": 0},
        torchft={"timeout_s": 2, "quorum_timeout_s": 2, "pg_timeout_s": 1, "connect_timeout_s": 2},
    )
    config = tenant.write("evil.json", json.dumps(evil.model_dump(mode="json")))
    forged = {
        "SLURM_JOB_ID": str(victim.job_id),
        "SLURM_STEP_ID": "0",
        "SLURMD_NODENAME": victim.node,
        "LAMPLIGHTER_JOB": victim.api.job(victim.job_id).name[len("ll-") : -len("-g0")],
        "LAMPLIGHTER_REPLICA_ID": "0",
        "LAMPLIGHTER_ATTEMPT": "0",
        "LAMPLIGHTER_RUN_DIR": str(victim.run_dir),
        "LAMPLIGHTER_CONFIG": str(config),
        "RANK": "0",
    }
    forger = ["env", *(f"{k}={v}" for k, v in forged.items()), "bash", "-c", "sleep 3; exit 1"]
    body = f"srun {shlex.join(forger)}\nexit 1"
    theirs = sbatch_as(tenant, lab, "mallory", body, f"--nodelist={victim.node}", "--ntasks=1", "--cpus-per-task=1")
    outside = subprocess.Popen(
        ["runuser", "-u", tenant.name, "--", "env", *(f"{k}={v}" for k, v in forged.items()), "sleep", "3"]
    )
    wait_for(lambda: gone_from_queue(victim.api, theirs), 60, "the tenant's job to end")
    assert outside.wait(timeout=30) == 0
    # Long past the exit grace after which the old daemon requeued a job whose "trainer" had exited.
    cycles_later(lab, victim.node, int((EXIT_GRACE_S + 3) / 0.5))
    info = victim.api.job(victim.job_id)
    assert (info.state, info.restarts) == ("RUNNING", 0)  # Slurm: not requeued
    assert victim.alive()  # the kernel: the victim's trainer was not killed
    about = [a for a in node_actions(lab, victim.node) if str(victim.job_id) in json.dumps(a.get("jobs", []))]
    assert about == []
    [watch] = [j for j in status(lab, victim.node)["jobs"] if j["job"] == forged["LAMPLIGHTER_JOB"]]
    assert watch["config"] == str(victim.run_dir / "job.json") and watch["hang_timeout_s"] == 3.0
    log = daemon_log(lab, victim.node)
    assert f"(uid {tenant.uid}, Slurm job {theirs} step " in log
    assert f"job {theirs} is 'mallory', no lamplighter group job" in log


def test_symlinked_or_fifo_run_dir_files_change_nothing_and_do_not_stall_the_daemon(
    lab: SlurmLab, tenant: Tenant
) -> None:
    """The tenant's own lamplighter-named job points the daemon at a run directory whose job.json,
    lighthouse.json and heartbeat are FIFOs, whose stop-at is a link to /dev/zero, and whose actions.jsonl is a
    link to where root would create a file. The job fails, so the daemon acts on it and writes the action
    there: nothing root-owned appears, the daemon keeps cycling, and its log says why."""
    run = tenant.folder("evil-run")
    for name in ("job.json", "lighthouse.json"):
        os.mkfifo(run / name)
        os.chown(run / name, tenant.uid, tenant.gid)
    beats = tenant.folder("evil-run/heartbeat")
    os.mkfifo(beats / "0.0.json")
    os.chown(beats / "0.0.json", tenant.uid, tenant.gid)
    target = lab.root / "root-only" / "completed"  # what the old daemon created, as root, through the link
    target.parent.mkdir(mode=0o755)
    os.symlink(target, run / "actions.jsonl")
    os.symlink("/dev/zero", run / "stop-at")
    for link in ("actions.jsonl", "stop-at"):
        os.chown(run / link, tenant.uid, tenant.gid, follow_symlinks=False)
    env = {
        "LAMPLIGHTER_JOB": "evil",
        "LAMPLIGHTER_REPLICA_ID": "0",
        "LAMPLIGHTER_RUN_DIR": str(run),
        "LAMPLIGHTER_CONFIG": str(run / "job.json"),
    }
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    node = lab.compute[0]
    body = f"srun env {exports} bash -c 'sleep 4; exit 1'\nexit 1"
    theirs = sbatch_as(tenant, lab, "ll-evil-g0", body, f"--nodelist={node}", "--ntasks=1", "--cpus-per-task=1")
    api = SlurmActions(lab.cluster.cli())
    try:
        wait_for(lambda: api.job(theirs).restarts >= 1, 60, "the daemon to requeue the tenant's failed job")
        cycles_later(lab, node, 10)  # the daemon cycles on with the FIFOs still in place
    finally:
        api.cancel(theirs)
    assert not target.exists() and not target.is_symlink()  # the kernel: nothing created where the link points
    assert os.listdir(target.parent) == []
    log = daemon_log(lab, node)
    assert f"Slurm job {theirs}: cannot use its config {run}/job.json: is not a regular file" in log
    assert f"not appending the action to {run}/actions.jsonl as uid {tenant.uid}" in log
    assert "Too many levels of symbolic links" in log
    # The action itself was taken, and kept in the node's own log.
    assert any(a["action"] == "requeue" and a["target"] == str(theirs) for a in node_actions(lab, node))


def test_a_forged_completed_or_lighthouse_json_from_another_uid_is_ignored(
    lab: SlurmLab, tenant: Tenant, victim: Victim
) -> None:
    """The victim's run directory is writable by others (the old advice). The tenant puts a `completed` marker
    there (the job would end quietly) and a lighthouse.json naming a Lighthouse of her own. The victim's node
    daemon reads neither, its in-job agent neither: a killed trainer is restarted, and both say why."""
    forged_completed = victim.run_dir / "completed"
    tenant.run(["sh", "-c", f"echo 'group 0' > {shlex.quote(str(forged_completed))}"])
    lighthouse = RunPaths(victim.run_dir).lighthouse()
    lighthouse.unlink(missing_ok=True)
    tenant.run(["sh", "-c", f'echo \'{{"address": "http://203.0.113.7:29510"}}\' > {shlex.quote(str(lighthouse))}'])
    assert forged_completed.stat().st_uid == tenant.uid == lighthouse.stat().st_uid
    cycles_later(lab, victim.node, 4)
    [watch] = [j for j in status(lab, victim.node)["jobs"] if j["run_dir"] == str(victim.run_dir)]
    assert watch["lighthouse"] == f"http://{lab.head}:29597"  # the config's own address, not the forged one
    why = f"{lighthouse}: belongs to uid {tenant.uid}, not to uid 0: ignored"
    assert f"ignoring its published Lighthouse address: {why}" in daemon_log(lab, victim.node)
    # Even its own address is read only where Slurm runs the job's Lighthouse: this job has none.
    assert "no running Lighthouse job" in (watch["lighthouse_error"] or ""), watch
    # The victim's trainer dies: its agent restarts it (the job is not complete), ignoring the marker.
    os.kill(victim.trainer[0], signal.SIGKILL)
    journal = victim.run_dir / "injob" / "g0.jsonl"
    wait_for(lambda: journal.exists() and '"attempt":1' in journal.read_text(), 60, "an in-job restart")
    assert victim.api.job(victim.job_id).state == "RUNNING"
    [out] = (victim.run_dir / "logs").glob("g0-*.out")
    text = out.read_text()
    assert f"ignoring {forged_completed}: belongs to uid {tenant.uid}, not to uid 0: ignored" in text
    assert "after the job reached its target" not in text


def test_the_victims_processes_are_in_its_own_cgroup(lab: SlurmLab, victim: Victim) -> None:
    """What the daemon trusts: the kernel's cgroup of the victim's trainer names the victim's job."""
    text = Path(f"/proc/{victim.trainer[0]}/cgroup").read_text()
    cg = parse_cgroup(text)
    assert cg is not None and cg.job_id == victim.job_id and cg.node == victim.node, text
