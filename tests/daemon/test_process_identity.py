"""Which processes are a job's: the kernel's cgroup and Slurm's answer decide, never the process's environment.

Recorded inputs: /proc/PID/cgroup of a test-cluster task and batch step (cgroup v1, multiple slurmd), of a
process in no job, and `squeue -O` of jobs_by_id; the cgroup v2 lines follow Slurm's documented layout.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_node import PID0, FakeNode

from lamplighter.configs.schema import JobConfig
from lamplighter.configs.slurm_names import parse_group_job_name
from lamplighter.slurm.parsers import JobInfo, ParseError, parse_squeue_jobs
from lamplighter.slurm.step_cgroup import StepCgroup, parse_cgroup
from lamplighter.supervisor.node.identity import verify
from lamplighter.supervisor.node.trainers import StepProcess

RECORDED = Path(__file__).parent / "recorded"
SLURM_RECORDED = Path(__file__).parent.parent / "slurm" / "recorded"


def test_the_recorded_cgroup_lines_name_job_step_user_and_node() -> None:
    step0 = parse_cgroup((RECORDED / "proc_cgroup_v1_step0.txt").read_text())
    assert step0 == StepCgroup(4716, "0", 1001, "n1") and step0.numbered == 0
    batch = parse_cgroup((RECORDED / "proc_cgroup_v1_batch.txt").read_text())
    assert batch == StepCgroup(4716, "batch", 1001, "n1") and batch.numbered is None
    assert parse_cgroup((RECORDED / "proc_cgroup_v1_no_slurm.txt").read_text()) is None


@pytest.mark.parametrize(
    "text, want",
    [
        ("4:freezer:/slurm/uid_1000/job_42/step_3/task_0\n", StepCgroup(42, "3", 1000, None)),  # one slurmd a host
        ("0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_1\n", StepCgroup(42, "0", None, None)),
        ("0::/system.slice/n7_slurmstepd.scope/job_9/step_batch/user/task_0\n", StepCgroup(9, "batch", None, "n7")),
        # What a user may build below her own step counts for nothing: only the path's start does.
        ("6:freezer:/slurm_n1/uid_5/job_7/step_0/job_8/step_0\n", StepCgroup(7, "0", 5, "n1")),
        (
            "0::/x/slurmstepd.scope/job_7/step_0/user/task_0/slurmstepd.scope/job_8/step_0\n",
            StepCgroup(7, "0", None, None),
        ),
        # A path that only looks like Slurm's, not at the hierarchy's root, or half of one.
        ("6:freezer:/home/slurm/uid_5/job_7/step_0\n", None),
        ("6:freezer:/slurm/uid_5/job_7\n", None),
        ("6:freezer:/slurm/uid_x/job_7/step_0\n", None),
        ("0::/user.slice/job_7/step_0\n", None),
        ("garbage\n\n", None),
    ],
)
def test_cgroup_shapes(text: str, want: StepCgroup | None) -> None:
    assert parse_cgroup(text) == want


def test_squeue_jobs_recorded_and_refused_when_a_line_is_not_what_was_asked() -> None:
    text = (SLURM_RECORDED / "squeue_jobs_by_id.txt").read_text()
    jobs = parse_squeue_jobs(text, [4711, 4713, 4715, 4716, 99999])
    assert sorted(jobs) == [4711, 4713, 4715, 4716]  # 99999: Slurm does not know it, so it is absent
    j = jobs[4716]
    assert (j.state, j.user_id, j.node_list, j.restarts, j.name) == ("RUNNING", 1001, "n1", 0, "")
    assert j.start_epoch == 1795739952.0  # 2026-11-27T00:39:12, printed in UTC (TZ=UTC)
    assert jobs[4711].user_id == 0
    with pytest.raises(ParseError):
        parse_squeue_jobs(text, [4711])  # a job not asked for
    with pytest.raises(ParseError):
        parse_squeue_jobs(text + text, [4711, 4713, 4715, 4716])  # a job twice


def test_group_job_names() -> None:
    assert parse_group_job_name("ll-llama-3-g12") == ("llama-3", 12)
    assert parse_group_job_name("ll-llama-lighthouse") is None
    assert parse_group_job_name("ll--g1") is None
    assert parse_group_job_name("xx-llama-g1") is None


def proc(
    uid: int = 1001, job: int = 42, step: str = "0", started: float = 1000.0, cg_uid: int | None = None
) -> StepProcess:
    return StepProcess(7, 1, 100, "S", uid, StepCgroup(job, step, cg_uid, None), started, 7)


def info(state: str = "RUNNING", uid: int = 1001, nodes: str = "n[1-2]", start: str = "1970-01-01T00:16:40") -> JobInfo:
    return JobInfo(42, "", state, None, 3, "n1", nodes, start, True, None, fields={"UserId": str(uid)})


def test_verify_holds_the_process_against_slurm() -> None:
    ok = verify(proc(), info(), "ll-llama-g2", "n1", "ll-")
    assert (ok.kind, ok.job_name, ok.replica_id) == ("ours", "llama", 2)
    assert verify(proc(), None, "ll-llama-g2", "n1", "ll-").kind == "unknown"
    assert verify(proc(uid=1002), info(), "ll-llama-g2", "n1", "ll-").kind == "not_ours"
    assert verify(proc(cg_uid=1002), info(), "ll-llama-g2", "n1", "ll-").kind == "not_ours"
    assert verify(proc(), info(), "my-own-job", "n1", "ll-").kind == "not_ours"
    stale = [
        verify(proc(), info(state="PENDING"), "ll-llama-g2", "n1", "ll-"),
        verify(proc(), info(nodes="n3"), "ll-llama-g2", "n1", "ll-"),
        verify(proc(started=990.0), info(), "ll-llama-g2", "n1", "ll-"),  # before the job's current run
    ]
    assert [v.kind for v in stale] == ["stale"] * 3
    assert "runs on n3, not on n1" in stale[1].reason and "before job 42's current run" in stale[2].reason
    # Within the clocks' slack (whole seconds on both sides): the current run's.
    assert verify(proc(started=998.5), info(), "ll-llama-g2", "n1", "ll-").kind == "ours"
    assert verify(proc(), info(state="COMPLETED"), "ll-llama-g2", "n1", "ll-").kind == "ended"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[FakeNode]:
    n = FakeNode(tmp_path)
    try:
        yield n
    finally:
        n.close()
        n.remove()


# The fixed hang timeout: these tests are about whose processes a hang kills, not the learned pace
# (tests/supervisor/test_progress_pace.py).
HEALTH = {"hang_timeout_s": 20, "startup_timeout_s": 60, "progress": "heartbeat", "hang_pace_factor": 0}


def kinds(results: list[dict]) -> list[str]:  # type: ignore[type-arg]
    return [r["action"] for r in results]


def test_a_forged_environment_gets_nothing(node: FakeNode, caplog: pytest.LogCaptureFixture) -> None:
    """Mallory's process carries Alice's job id, name, group, run dir and config; it sits in Mallory's own job's
    cgroup (or in none). It is not adopted; its exit and its silence lead to nothing; the job's settings
    are never read from the config it names."""
    run_dir, config = node.job_dir(JobConfig(name="alice", health=HEALTH, restart={"in_job": 0}), owner=1001)
    alice = node.submit("alice", 0, user_id=1001)
    node.task(PID0 + 1, alice, "alice", 0, run_dir=run_dir, config=config, uid=1001)
    script = node.tmp / "train.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=train\n")
    mallory_job = node.slurm.submit(script, user_id=1002)  # her own job, not a lamplighter one
    _, evil_cfg = node.job_dir({"name": "evil", "health": {"hang_timeout_s": 1, "startup_timeout_s": 1}})
    forged = {"SLURM_JOB_ID": str(alice)}
    node.task(PID0 + 2, alice, "alice", 0, run_dir=run_dir, config=evil_cfg, uid=1002, cgroup_job=mallory_job)
    node.task(PID0 + 3, alice, "alice", 0, run_dir=run_dir, config=evil_cfg, uid=1002, extra_env=forged)
    (node.proc / str(PID0 + 3) / "cgroup").write_text("6:freezer:/\n0::/\n")  # in no job at all
    with caplog.at_level(logging.INFO):
        assert node.run(3) == []
    adopted = {t["pid"] for t in node.loop.status()["trainers"]}
    assert adopted == {PID0 + 1}
    assert set(node.exits.watched) == {PID0 + 1}
    refusal = [r.getMessage() for r in caplog.records if "not adopting" in r.getMessage()]
    assert any(f"job {mallory_job} is 'train', no lamplighter group job" in m for m in refusal), refusal
    # The forger's process ends badly, and stays silent: nothing happens to Alice's job.
    node.gone(PID0 + 2, returncode=1)
    node.gone(PID0 + 3, returncode=1)
    assert node.run(30) == []
    assert node.slurm.job(alice).restarts == 0
    [watch] = node.loop.status()["jobs"]
    assert watch["config"] == str(config)  # Alice's own settings, never the forger's


def test_a_process_of_another_user_in_the_jobs_cgroup_is_not_adopted(node: FakeNode) -> None:
    run_dir, config = node.job_dir(JobConfig(name="alice", health=HEALTH), owner=1001)
    alice = node.submit("alice", 0, user_id=1001)
    node.task(PID0 + 1, alice, "alice", 0, run_dir=run_dir, config=config, uid=1002)  # e.g. a setuid helper
    assert node.run(3) == []
    assert node.loop.status()["trainers"] == []


def test_processes_from_before_the_jobs_current_run_are_fenced_not_adopted(node: FakeNode) -> None:
    run_dir, config = node.job_dir(JobConfig(name="alice", health=HEALTH), owner=1001)
    alice = node.submit("alice", 0, user_id=1001)
    early = node.ticks() - 1000  # 10 s before its StartTime
    node.task(PID0 + 1, alice, "alice", 0, run_dir=run_dir, config=config, uid=1001, start=early)
    node.task(PID0 + 2, alice, "alice", 0, run_dir=run_dir, config=config, uid=1001)
    results = node.run(8)
    assert {t["pid"] for t in node.loop.status()["trainers"]} == {PID0 + 2}
    fenced = [r for r in results if r["action"] == "kill_local"]
    assert len(fenced) == 1 and fenced[0]["already_gone"] == [PID0 + 1]  # after the grace, once
    assert node.slurm.job(alice).restarts == 0
    line = next(json.loads(x) for x in node.lines if json.loads(x)["action"] == "kill_local")
    assert line["reason"].startswith("FENCED: ") and "before job" in line["reason"]


def beat(run_dir: Path, group: int, step: int, t: float, attempt: int) -> None:
    path = run_dir / "heartbeat" / f"{group}.0.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"step": step, "time": t, "pid": 1, "attempt": attempt}))


def test_a_hung_trainer_with_in_job_restarts_loses_its_step_only_and_its_spare_takes_over(node: FakeNode) -> None:
    run_dir, config = node.job_dir(JobConfig(name="llama", health=HEALTH, restart={"in_job": 3}))
    job = node.submit("llama", 0)
    trainer, spare = PID0 + 10, PID0 + 20
    node.task(trainer, job, "llama", 0, run_dir=run_dir, config=config, step="0")
    node.task(spare, job, "llama", 0, run_dir=run_dir, config=config, step="1", extra_env={"LAMPLIGHTER_ATTEMPT": "1"})
    beat(run_dir, 0, 5, node.clock.t, 0)
    results = node.run(35)  # the trainer's heartbeat stops at step 5; the idle spare is never judged
    assert kinds(results) == ["kill_local"], results
    assert results[0]["already_gone"] == [trainer]  # its step only: not the spare, no requeue
    assert node.slurm.job(job).restarts == 0
    node.gone(trainer, returncode=-9)  # the kill lands; the job's agent hands its place to the spare
    beat(run_dir, 0, 6, node.clock.t + 1, 1)
    assert node.run(15) == []  # restarted in the job: nothing to do, and the new trainer is watched
    assert node.slurm.job(job).restarts == 0


def test_a_killed_step_nobody_replaces_is_requeued_after_the_grace(node: FakeNode) -> None:
    run_dir, config = node.job_dir(JobConfig(name="llama", health=HEALTH, restart={"in_job": 3}))
    job = node.submit("llama", 0)
    node.task(PID0 + 10, job, "llama", 0, run_dir=run_dir, config=config)
    beat(run_dir, 0, 5, node.clock.t, 0)
    assert kinds(node.run(25)) == ["kill_local"]
    node.gone(PID0 + 10, returncode=-9)
    results = node.run(12)  # exit_grace_s 10: the job still RUNNING and no step of it here
    assert kinds(results) == ["requeue"], results
    assert node.slurm.job(job).restarts == 1
