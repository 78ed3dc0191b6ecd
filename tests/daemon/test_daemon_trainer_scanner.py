"""The node daemon's trainer scanner on a fake /proc: cached verdicts, and what a full rescan catches."""

from __future__ import annotations

from pathlib import Path

from lamplighter.daemon.node_trainers import FULL_RESCAN_EVERY, TrainerScanner, task_roots
from lamplighter.trainer.contract import ENV_JOB, ENV_REPLICA_ID

TASK_ENV = {
    ENV_JOB: "llama",
    ENV_REPLICA_ID: "1",
    "SLURM_JOB_ID": "42",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "0",
    "SLURMD_NODENAME": "n2",
}


def proc(root: Path, pid: int, env: dict[str, str], start: int = 500, ppid: int = 1) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    fields = [str(pid), "(python)", "S", str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 30
    (d / "stat").write_text(" ".join(fields) + "\n")
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))


def fake_proc(tmp_path: Path) -> Path:
    (tmp_path / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    return tmp_path


def test_new_trainer_found_at_once_and_other_nodes_ignored(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    proc(root, 10, {"PATH": "/bin"})
    scanner = TrainerScanner(root, "n2")
    assert scanner.scan() == []
    proc(root, 11, TASK_ENV)
    proc(root, 12, {**TASK_ENV, "SLURMD_NODENAME": "n3"})
    assert [t.proc.pid for t in scanner.scan()] == [11]


def test_exec_after_being_seen_is_caught_by_the_next_full_rescan(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    proc(root, 20, {"PATH": "/bin"})  # slurmstepd's child between fork and exec
    scanner = TrainerScanner(root, "n2")
    assert scanner.scan() == []
    proc(root, 20, TASK_ENV)  # same pid and start time, now the task's environment
    results = [scanner.scan() for _ in range(FULL_RESCAN_EVERY)]
    assert results[-1] and results[-1][0].proc.pid == 20
    assert all(r == [] for r in results[:-1])  # cached verdicts until the full rescan


def test_reused_pid_of_a_trainer_is_a_new_process(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    proc(root, 30, TASK_ENV, start=100)
    scanner = TrainerScanner(root, "n2")
    [first] = scanner.scan()
    proc(root, 30, {"PATH": "/bin"}, start=200)  # the trainer died, its pid went to something else
    assert scanner.scan() == [] and first.proc.start_time == 100


def test_task_roots_are_the_processes_whose_parent_is_not_of_the_same_job(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    other_job = {**TASK_ENV, "SLURM_JOB_ID": "43"}
    proc(root, 40, TASK_ENV, ppid=7)  # torchrun's agent; 7 is slurmstepd (no job environment)
    proc(root, 41, TASK_ENV, ppid=40)  # a worker
    proc(root, 42, TASK_ENV, ppid=41)  # its data-loader worker
    proc(root, 44, other_job, ppid=40)  # another job's task under it (cannot happen in Slurm; still a root)
    found = TrainerScanner(root, "n2").scan()
    assert [t.proc.pid for t in found] == [40, 41, 42, 44]
    assert [t.proc.pid for t in task_roots(found)] == [40, 44]


def test_a_child_gives_away_a_root_seen_before_its_exec(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    proc(root, 50, {"PATH": "/bin"}, ppid=7)  # the task between slurmstepd's fork and its exec
    scanner = TrainerScanner(root, "n2")
    assert scanner.scan() == []
    proc(root, 50, TASK_ENV, ppid=7)  # exec'd: the task wrapper, then the trainer, same pid
    proc(root, 51, TASK_ENV, ppid=50)  # and it started a worker
    found = scanner.scan()  # not a full rescan: 50 is cached as no trainer, but 51 names it
    assert [t.proc.pid for t in found] == [50, 51]
    assert [t.proc.pid for t in task_roots(found)] == [50]
