"""Warm standbys on a Slurm node, with real processes: the daemon's broker, a standby, and the task side
(`python -m lamplighter.slurm.warm_task`) as a rendered group script runs it. No Slurm is needed for what
is tested here: the task is a plain process holding its stdout and stderr, as a Slurm task does.

The standbys preload `json` (cheap); what they preload does not change how they become a trainer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from realparts import wait_for

from lamplighter.configs.schema import NodeStandbyConfig
from lamplighter.daemon.standby_broker import StandbyBroker
from lamplighter.lab.slurm_lab import answers, pool_quiet
from lamplighter.slurm.warm_task import PREFIX

# Records what it sees, then exits with its last argument; "wait" waits for SIGTERM and exits 42 on it.
PROBE = """
import json, os, signal, sys, time
print("probe says hello", flush=True)
out = {"argv": sys.argv, "marker": os.environ.get("MARKER"), "cwd": os.getcwd(), "pid": os.getpid()}
open(os.environ["PROBE_OUT"], "w").write(json.dumps(out))
if sys.argv[-1] == "wait":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))
    if os.environ.get("PROBE_CHILD"):  # what torchrun's workers or a data loader would be
        import subprocess
        child = subprocess.Popen(["sleep", "600"])
        open(os.environ["PROBE_CHILD"], "w").write(str(child.pid))
    open(os.environ["PROBE_OUT"] + ".waiting", "w").close()
    while True:
        time.sleep(0.05)
sys.exit(int(sys.argv[-1]))
"""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[StandbyBroker]:
    cfg = NodeStandbyConfig(count=1, preload=["json"], socket=str(tmp_path / "run" / "standby.sock"), refill_after_s=0)
    b = StandbyBroker(cfg, dict(os.environ), tmp_path / "standby-logs", now=0.0)
    b.start()
    b.cycle(0.0)
    wait_for(lambda: b.status()["ready"] == 1, 60, "the standby past its preload")
    try:
        yield b
    finally:
        b.close()
        for p, _, _ in b.trainers.values():
            p.kill()
            p.wait()


def task(tmp_path: Path, sock: str, argv: list[str], cwd: Path | None = None, **extra: str) -> subprocess.Popen[bytes]:
    """A task as srun starts it: its own stdout and stderr (files here), MARKER in its environment."""
    env = dict(os.environ, MARKER="the task's own", PROBE_OUT=str(tmp_path / "probe.json"), **extra)
    return subprocess.Popen(
        [sys.executable, "-m", "lamplighter.slurm.warm_task", "--socket", sock, "--", *argv],
        stdout=open(tmp_path / "task.out", "wb"),
        stderr=open(tmp_path / "task.err", "wb"),
        env=env,
        cwd=cwd or tmp_path,
    )


def probe(tmp_path: Path, where: Path | None = None) -> Path:
    script = (where or tmp_path) / "train me.py"
    script.write_text(PROBE)
    return script


@pytest.mark.parametrize("hostile", ["plain", 'we\'ird "dir" $(x) ;&'])
def test_a_task_runs_warm_with_its_argv_env_cwd_output_and_exit_code(
    tmp_path: Path, broker: StandbyBroker, hostile: str
) -> None:
    where = tmp_path / hostile
    where.mkdir()
    standby_pid = broker.pool.idle[0].popen.pid
    t = task(tmp_path, broker.cfg.socket, [sys.executable, str(probe(tmp_path, where)), "a b", "3"], cwd=where)
    assert t.wait(timeout=60) == 3
    seen = json.loads((tmp_path / "probe.json").read_text())
    assert seen["pid"] == standby_pid  # the standby became the trainer
    assert seen["argv"] == [str(where / "train me.py"), "a b", "3"]
    assert (seen["marker"], seen["cwd"]) == ("the task's own", str(where))
    assert (tmp_path / "task.out").read_text() == "probe says hello\n"  # the task's own stdout
    assert f"{PREFIX} the trainer runs warm as pid {standby_pid}" in (tmp_path / "task.err").read_text()
    assert broker.status()["warm"] == 1 and broker.status()["idle"] == 0
    broker.cycle(1.0)  # refill_after_s 0: a new standby at once
    assert broker.status()["idle"] == 1 and broker.status()["started"] == 2


def test_without_a_daemon_or_an_idle_standby_the_task_starts_cold_and_says_why(
    tmp_path: Path, broker: StandbyBroker
) -> None:
    script = str(probe(tmp_path))
    t = task(tmp_path, str(tmp_path / "nobody.sock"), [sys.executable, script, "5"])
    assert t.wait(timeout=60) == 5
    assert json.loads((tmp_path / "probe.json").read_text())["pid"] == t.pid  # cold: the task itself
    assert f"{PREFIX} starting cold: no standby at {tmp_path / 'nobody.sock'}" in (tmp_path / "task.err").read_text()
    # Another interpreter than the standbys': cold, with the reason from the daemon.
    t = task(tmp_path, broker.cfg.socket, ["/bin/sh", "-c", "echo cold run; exit 4"])
    assert t.wait(timeout=60) == 4
    assert "is not `" in (tmp_path / "task.err").read_text()
    assert (tmp_path / "task.out").read_text() == "cold run\n"
    assert broker.status()["cold"] == 1 and broker.status()["idle"] == 1


def test_signals_reach_the_warm_trainer_and_its_exit_code_comes_back(tmp_path: Path, broker: StandbyBroker) -> None:
    t = task(tmp_path, broker.cfg.socket, [sys.executable, str(probe(tmp_path)), "wait"])
    wait_for(lambda: (tmp_path / "probe.json.waiting").exists(), 60, "the warm trainer waiting for SIGTERM")
    t.send_signal(signal.SIGTERM)  # what Slurm sends a step's tasks first
    assert t.wait(timeout=60) == 42


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_killed_task_takes_its_warm_trainer_with_it(tmp_path: Path, broker: StandbyBroker) -> None:
    child_file = tmp_path / "child.pid"
    t = task(tmp_path, broker.cfg.socket, [sys.executable, str(probe(tmp_path)), "wait"], PROBE_CHILD=str(child_file))
    wait_for(lambda: (tmp_path / "probe.json.waiting").exists(), 60, "the warm trainer running")
    child = int(child_file.read_text())
    assert not gone(child)
    [(trainer, task_pid, _)] = broker.trainers.values()
    assert task_pid == t.pid
    t.kill()
    t.wait(timeout=30)
    # The trainer notices by itself (the broker's cycle is not run here), and takes what it started along.
    assert trainer.wait(timeout=30) == -signal.SIGKILL
    wait_for(lambda: gone(child), 30, "the trainer's own child gone with it")


def test_a_stopped_trainer_whose_task_is_gone_is_killed_by_the_daemon(tmp_path: Path, broker: StandbyBroker) -> None:
    t = task(tmp_path, broker.cfg.socket, [sys.executable, str(probe(tmp_path)), "wait"])
    wait_for(lambda: (tmp_path / "probe.json.waiting").exists(), 60, "the warm trainer running")
    [(trainer, _, _)] = broker.trainers.values()
    os.kill(trainer.pid, signal.SIGSTOP)  # hung: it cannot notice its task's end
    t.kill()
    t.wait(timeout=30)
    broker.cycle(5.0)
    assert trainer.poll() is None  # a cycle's grace: a trainer may still be finishing after its task ended
    broker.cycle(5.5)
    assert trainer.wait(timeout=30) == -signal.SIGKILL
    broker.cycle(6.0)
    assert broker.status()["trainers"] == []


def test_a_stopped_trainer_whose_task_is_gone_dies_with_the_service(tmp_path: Path, broker: StandbyBroker) -> None:
    # Found by the benchmark: a hung warm trainer whose job was cancelled outlived the service, stopped, 300 MB.
    t = task(tmp_path, broker.cfg.socket, [sys.executable, str(probe(tmp_path)), "wait"])
    wait_for(lambda: (tmp_path / "probe.json.waiting").exists(), 60, "the warm trainer running")
    [(trainer, _, _)] = broker.trainers.values()
    os.kill(trainer.pid, signal.SIGSTOP)
    t.kill()
    t.wait(timeout=30)
    broker.close()  # no cycle ran since the task ended
    assert trainer.wait(timeout=30) == -signal.SIGKILL


def test_the_pool_is_quiet_only_once_its_trainer_is_gone_and_it_is_refilled(
    tmp_path: Path, broker: StandbyBroker
) -> None:
    # The benchmark waits for this between runs: a refill importing torch would slow the next run's steps.
    assert pool_quiet(broker.status(), want=1)
    t = task(tmp_path, broker.cfg.socket, [sys.executable, str(probe(tmp_path)), "wait"])
    wait_for(lambda: (tmp_path / "probe.json.waiting").exists(), 60, "the warm trainer running")
    assert not pool_quiet(broker.status(), want=1)
    t.send_signal(signal.SIGTERM)  # forwarded: the trainer exits 42
    assert t.wait(timeout=30) == 42
    clock = iter(range(1, 10_000))

    def after_a_cycle() -> bool:
        broker.cycle(float(next(clock)))  # reaps the trainer once it has exited, starts a new standby
        return pool_quiet(broker.status(), want=1)

    wait_for(after_a_cycle, 60, "the trainer reaped and a new standby past its preload")
    assert broker.status()["started"] == 2 and broker.status()["trainers"] == []
    # The one task was answered warm; a second node's broker adds its own counts.
    assert answers({"n1": broker.status(), "n2": {"warm": 2, "cold": 1}}) == {"warm": 3, "cold": 1}


def test_a_bad_request_gets_a_reason_not_a_standby(tmp_path: Path, broker: StandbyBroker) -> None:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(broker.cfg.socket)
        s.sendall(b'{"argv": ["x"]}\n')  # no descriptors, no env
        answer = s.makefile().readline()
    assert answer.startswith("cold expected the task's stdout and stderr"), answer
    assert broker.status()["idle"] == 1


# A task of another user, in a plain interpreter (the venv's is under /root): connects, sends, prints the answers.
OTHER_USERS_TASK = """
import json, os, socket, sys
c = socket.socket(socket.AF_UNIX)
c.connect(sys.argv[1])
req = json.dumps({"argv": sys.argv[2:], "env": {"PROBE_OUT": os.environ["PROBE_OUT"]}, "cwd": os.getcwd()})
socket.send_fds(c, [req.encode() + b"\\n"], [1, 2])
print(c.makefile().read(), end="")
"""
NOBODY = 65534


@pytest.mark.skipif(os.getuid() != 0, reason="a standby drops to the task's user only when the daemon runs as root")
def test_a_root_daemons_standby_runs_the_trainer_as_the_tasks_user(tmp_path: Path) -> None:
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="lamplighter-standby-"))  # tmp_path is root's alone
    try:
        shared.chmod(0o777)
        (shared / "train.py").write_text(
            "import json, os\nopen(os.environ['PROBE_OUT'], 'w').write(json.dumps([os.getuid(), os.getgid()]))\n"
        )
        cfg = NodeStandbyConfig(count=1, preload=["json"], socket=str(shared / "standby.sock"))
        b = StandbyBroker(cfg, dict(os.environ), tmp_path / "logs", now=0.0)
        b.start()
        try:
            b.cycle(0.0)
            wait_for(lambda: b.status()["ready"] == 1, 60, "the standby past its preload")
            out = subprocess.run(
                ["/usr/bin/python3", "-c", OTHER_USERS_TASK, cfg.socket, sys.executable, str(shared / "train.py")],
                env={"PROBE_OUT": str(shared / "probe.json")},
                cwd=shared,
                user=NOBODY,
                group=NOBODY,
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            b.close()
        assert out.stdout.startswith("started ") and out.stdout.endswith("exit 0\n"), (out.stdout, out.stderr)
        assert json.loads((shared / "probe.json").read_text()) == [NOBODY, NOBODY]
    finally:
        import shutil

        shutil.rmtree(shared)


def test_the_standby_command_refuses_a_node_without_standbys_and_reports_a_missing_service(tmp_path: Path) -> None:
    cfg = tmp_path / "node.yaml"
    cfg.write_text(f"state_dir: {tmp_path / 'state'}\nstandby: {{socket: {tmp_path / 'standby.sock'}}}\n")
    run = [sys.executable, "-m", "lamplighter", "standby", "--config", str(cfg)]
    off = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert off.returncode == 2 and "standby.count is 0" in off.stderr
    status = subprocess.run([*run, "--status"], capture_output=True, text=True, timeout=60)
    assert status.returncode == 1 and f"standby socket {tmp_path / 'standby.sock'}" in status.stderr
    cfg.write_text("standby: {count: 1, sockets: /x}\n")
    bad = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "sockets" in bad.stderr


def test_a_warm_module_is_found_on_the_tasks_pythonpath(tmp_path: Path, broker: StandbyBroker) -> None:
    # Jobs put their own code on PYTHONPATH; a fresh interpreter reads it at start, a standby when it is taken.
    lib = tmp_path / "their code"
    (lib / "their_trainer").mkdir(parents=True)
    (lib / "their_trainer" / "__main__.py").write_text(PROBE)
    standby_pid = broker.pool.idle[0].popen.pid
    t = task(tmp_path, broker.cfg.socket, [sys.executable, "-m", "their_trainer", "6"], PYTHONPATH=str(lib))
    assert t.wait(timeout=60) == 6
    assert json.loads((tmp_path / "probe.json").read_text())["pid"] == standby_pid


def test_a_warm_tasks_trainer_is_found_through_the_stdout_it_was_given(tmp_path: Path, broker: StandbyBroker) -> None:
    # What chaos and the benchmarks hurt: the trainer, whose /proc environ and cmdline are its standby's.
    from lamplighter.supervisor.procfs import PROC, warm_trainer_of

    standby_pid = broker.pool.idle[0].popen.pid
    t = task(tmp_path, broker.cfg.socket, [sys.executable, str(probe(tmp_path)), "wait"])
    wait_for(lambda: (tmp_path / "probe.json.waiting").exists(), 60, "the warm trainer running")
    assert warm_trainer_of(PROC, t.pid) == standby_pid
    t.send_signal(signal.SIGTERM)
    assert t.wait(timeout=60) == 42


def test_chaos_finds_a_warm_groups_trainer_not_its_task(tmp_path: Path, broker: StandbyBroker) -> None:
    # A hang injected into the task would stop only the task: the trainer would keep training.
    from lamplighter.slurm.proc_find import trainer_procs
    from lamplighter.trainer.contract import ENV_JOB, ENV_REPLICA_ID

    standby_pid = broker.pool.idle[0].popen.pid
    group = {ENV_JOB: f"warm-{os.getpid()}", ENV_REPLICA_ID: "1", "RANK": "0"}
    t = task(tmp_path, broker.cfg.socket, [sys.executable, str(probe(tmp_path)), "wait"], **group)
    wait_for(lambda: (tmp_path / "probe.json.waiting").exists(), 60, "the warm trainer running")
    assert [p.pid for p in trainer_procs(group[ENV_JOB], 1)] == [standby_pid]
    t.send_signal(signal.SIGTERM)
    assert t.wait(timeout=60) == 42
