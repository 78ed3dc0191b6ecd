"""The node daemon's scanner on a fake /proc: processes by their Slurm cgroup, cached verdicts, full rescans."""

from __future__ import annotations

from pathlib import Path

from lamplighter.supervisor.node.trainers import (
    FULL_RESCAN_EVERY,
    NodeTrainer,
    TrainerScanner,
    node_trainer,
    task_roots,
    trainer_step,
)

# What a forger would write: the daemon reads only run dir, config, renewals and the attempt from it.
TASK_ENV = {"LAMPLIGHTER_JOB": "llama", "SLURM_JOB_ID": "42", "SLURM_PROCID": "0"}


def step_cgroup(job: int = 42, step: str = "0", node: str = "n2", uid: int = 1000) -> str:
    return f"7:pids:/\n6:freezer:/slurm_{node}/uid_{uid}/job_{job}/step_{step}\n0::/\n"


NO_JOB = "7:pids:/\n6:freezer:/\n0::/\n"


def proc(
    root: Path,
    pid: int,
    cgroup: str,
    start: int = 500,
    ppid: int = 1,
    uid: int = 1000,
    comm: str = "python",
    env: dict[str, str] = TASK_ENV,
) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    fields = [str(pid), f"({comm})", "S", str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 30
    (d / "stat").write_text(" ".join(fields) + "\n")
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    (d / "cgroup").write_text(cgroup)
    (d / "status").write_text(f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n")


def fake_proc(tmp_path: Path) -> Path:
    (tmp_path / "stat").write_text("cpu 1 2 3\nbtime 1700000000\n")
    return tmp_path


def test_a_step_process_is_found_at_once_and_other_nodes_and_no_job_ignored(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    proc(root, 10, NO_JOB)  # carries a job's environment, but the kernel puts it in no job
    scanner = TrainerScanner(root, "n2")
    assert scanner.scan() == []
    proc(root, 11, step_cgroup())
    proc(root, 12, step_cgroup(node="n3"))  # another slurmd's node on this host (the test cluster)
    proc(root, 13, step_cgroup(step="extern"))  # an adopted ssh session: Slurm's business
    [found] = scanner.scan()
    assert (found.pid, found.uid, found.cgroup.job_id, found.cgroup.step) == (11, 1000, 42, "0")


def test_a_process_moved_into_a_step_after_being_seen_is_caught_by_the_next_full_rescan(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    proc(root, 20, NO_JOB)  # slurmstepd's child between its fork and its move into the step
    scanner = TrainerScanner(root, "n2")
    assert scanner.scan() == []
    proc(root, 20, step_cgroup())  # same pid and start time, now in the step
    results = [scanner.scan() for _ in range(FULL_RESCAN_EVERY)]
    assert results[-1] and results[-1][0].pid == 20
    assert all(r == [] for r in results[:-1])  # cached verdicts until the full rescan


def test_reused_pid_of_a_step_process_is_a_new_process(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    proc(root, 30, step_cgroup(), start=100)
    scanner = TrainerScanner(root, "n2")
    [first] = scanner.scan()
    proc(root, 30, NO_JOB, start=200)  # the task died, its pid went to something else
    assert scanner.scan() == [] and first.start_time == 100


def verified(root: Path, scanner: TrainerScanner) -> list[NodeTrainer]:
    return [node_trainer(p, "llama", 1, "n2", 0) for p in scanner.scan()]


def test_task_roots_are_the_processes_whose_parent_is_not_of_the_same_step(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    proc(root, 39, step_cgroup(step="batch"), ppid=7)  # the group script (its in-job agent): no trainer
    proc(root, 40, step_cgroup(), ppid=8)  # torchrun's agent; 8 is slurmstepd (outside the step's cgroup)
    proc(root, 41, step_cgroup(), ppid=40)  # a worker
    proc(root, 42, step_cgroup(), ppid=41)  # its data-loader worker
    proc(root, 44, step_cgroup(step="1"), ppid=9)  # the warm spare step's task
    proc(root, 45, step_cgroup(job=43), ppid=40)  # another job's task under it (cannot happen in Slurm)
    found = verified(root, TrainerScanner(root, "n2"))
    assert [t.pid for t in found] == [39, 40, 41, 42, 44, 45]
    assert [t.pid for t in task_roots(found)] == [40, 44, 45]
    assert trainer_step([t for t in found if t.job_id == "42"]) == "0"  # the spare's step is higher


def test_a_child_gives_away_a_root_seen_before_its_move(tmp_path: Path) -> None:
    root = fake_proc(tmp_path)
    proc(root, 50, NO_JOB, ppid=7)  # the task between slurmstepd's fork and its move into the step
    scanner = TrainerScanner(root, "n2")
    assert scanner.scan() == []
    proc(root, 50, step_cgroup(), ppid=7)  # moved, exec'd: the task wrapper, then the trainer, same pid
    proc(root, 51, step_cgroup(), ppid=50)  # and it started a worker
    found = verified(root, scanner)  # not a full rescan: 50 is cached as in no job, but 51 names it
    assert [t.pid for t in found] == [50, 51]
    assert [t.pid for t in task_roots(found)] == [50]


def test_a_task_read_in_the_middle_of_its_exec_is_read_again(tmp_path: Path) -> None:
    """The kernel names the new program before the new environment is in place, and /proc/PID/environ reads
    empty in between. Seen in make scale: cached so, a restarted group's task carried no config for good and
    its daemon ran no hang check on it."""
    root = fake_proc(tmp_path)
    proc(root, 60, step_cgroup(), env={})  # the new name, no environment yet
    scanner = TrainerScanner(root, "n2")
    assert verified(root, scanner) == []
    proc(root, 60, step_cgroup(), env={**TASK_ENV, "LAMPLIGHTER_CONFIG": "/runs/llama/job.json"})
    [after] = verified(root, scanner)  # the next cycle, not a full rescan
    assert after.config == "/runs/llama/job.json"


def test_a_task_read_before_its_exec_is_read_again_after_it(tmp_path: Path) -> None:
    """slurmstepd moves its forked child into the step, then the child execs the task: read in between, it has
    slurmstepd's name, uid and environment (no LAMPLIGHTER_CONFIG). Seen in CI: the cached pre-exec record
    gave the victim's job the default settings for good."""
    root = fake_proc(tmp_path)
    proc(root, 60, step_cgroup(), comm="slurmstepd", uid=0, env={"SLURM_CONF": "/etc/slurm/slurm.conf"})
    scanner = TrainerScanner(root, "n2")
    [before] = verified(root, scanner)
    assert (before.uid, before.config) == (0, None)
    proc(root, 60, step_cgroup(), env={**TASK_ENV, "LAMPLIGHTER_CONFIG": "/runs/llama/job.json"})  # exec'd
    [after] = verified(root, scanner)  # not a full rescan
    assert (after.uid, after.config) == (1000, "/runs/llama/job.json")
