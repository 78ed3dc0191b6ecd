"""The compute daemon's loop on a fake node: which processes are a group, progress, and each job's own settings."""

from __future__ import annotations

import json
import logging
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_node import PID0, FakeNode

from lamplighter.configs.schema import JobConfig
from lamplighter.supervisor.gpu.observation import GpuObservation

# Timeouts a job may have (hang above every torchft wait, start-up above hang).
HEALTH = {"hang_timeout_s": 20, "startup_timeout_s": 60}
# Every failure requeued by the node daemon (no restart inside the allocation by the job's own agent).
REQUEUE = {"in_job": 0}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[FakeNode]:
    n = FakeNode(tmp_path)
    try:
        yield n
    finally:
        n.close()
        n.remove()


def kinds(results: list[dict]) -> list[str]:  # type: ignore[type-arg]
    return [r["action"] for r in results]


def test_a_worker_ending_is_no_group_failure_its_launcher_ending_is(node: FakeNode) -> None:
    run_dir, config = node.job_dir(JobConfig(name="llama", health={**HEALTH, "progress": "off"}))
    job = node.submit("llama", 1)
    root, worker, loader = PID0 + 100, PID0 + 101, PID0 + 102
    node.task(root, job, "llama", 1, run_dir=run_dir, config=config)  # torchrun's agent, started by slurmstepd
    node.task(worker, job, "llama", 1, ppid=root, run_dir=run_dir, config=config, start=node.ticks() + 10)
    node.task(loader, job, "llama", 1, ppid=worker, run_dir=run_dir, config=config, start=node.ticks() + 20)
    assert node.run(2) == []
    assert set(node.exits.watched) == {root}

    node.gone(worker, returncode=0)  # torchrun restarts its worker; the data loader lives on meanwhile
    assert node.run(30) == []
    assert node.slurm.job(job).restarts == 0

    node.gone(root, returncode=1)
    results = node.run(15)
    assert kinds(results) == ["kill_local", "requeue"], results
    # The kill covers the whole tree: the loader is still listed (the fake PID is "already gone" to the kernel).
    assert results[0]["already_gone"] == [loader]
    assert results[1]["outcome"] == "ok" and node.slurm.job(job).restarts == 1


def test_a_trainer_without_heartbeats_committing_steps_is_never_hung_and_is_once_it_stops(node: FakeNode) -> None:
    run_dir, config = node.job_dir(
        JobConfig(name="titan", health=HEALTH, restart=REQUEUE), lighthouse="http://head01:29777"
    )
    job = node.submit("titan", 1)
    node.task(PID0 + 200, job, "titan", 1, run_dir=run_dir, config=config)
    node.lighthouse.steps = {"torchtitan_ft_0:a": 0, "torchtitan_ft_1:b": 0}

    def commit() -> None:
        node.lighthouse.steps = {rid: step + 1 for rid, step in node.lighthouse.steps.items()}

    # Well past both the start-up (60 s) and hang (20 s) timeouts, with no heartbeat file at all.
    assert node.run(150, step_s=5.0, each=commit) == []
    # Read at the address its Lighthouse published, each read bounded well below the 1 s poll interval.
    assert {r for r in node.lighthouse.reads} == {("http://head01:29777", 0.25)}

    def peer_only() -> None:  # this node's group stops; its peer on another node goes on
        node.lighthouse.steps = {
            **node.lighthouse.steps,
            "torchtitan_ft_0:a": node.lighthouse.steps["torchtitan_ft_0:a"] + 1,
        }

    results = node.run(30, each=peer_only)
    assert kinds(results) == ["kill_local", "requeue"]
    line = next(x for x in node.lines if '"action":"requeue"' in x or '"action": "requeue"' in x)
    assert "hang_timeout_s 20" in line and "lighthouse" in line


def test_a_dead_lighthouse_excuses_silence_logged_once(node: FakeNode, caplog: pytest.LogCaptureFixture) -> None:
    # No lighthouse.json: the address its config fixes.
    run_dir, config = node.job_dir(
        JobConfig(
            name="titan",
            health=HEALTH,
            lighthouse={"host": "10.9.0.1", "port": 29510},
            slurm={"head_node": "n1"},
            restart=REQUEUE,
        )
    )
    job = node.submit("titan", 0)
    node.task(PID0 + 300, job, "titan", 0, run_dir=run_dir, config=config)
    node.lighthouse.down = True
    with caplog.at_level(logging.INFO):
        assert node.run(120) == []  # twice the start-up timeout, unseen: not a hang
    assert {a for a, _ in node.lighthouse.reads} == {"http://10.9.0.1:29510"}
    cannot = [r for r in caplog.records if "cannot read its Lighthouse" in r.getMessage()]
    assert len(cannot) == 1 and cannot[0].levelno == logging.WARNING

    node.lighthouse.down = False
    node.lighthouse.steps = {"0:x": 7}  # back, and the group is there but never moves: silence counts from now
    with caplog.at_level(logging.INFO):
        assert node.run(55) == []
        results = node.run(10)
    assert kinds(results) == ["kill_local", "requeue"]
    back = [r for r in caplog.records if r.levelno == logging.INFO and "can be read again" in r.getMessage()]
    assert len(back) == 1


def test_each_job_gets_its_own_hang_timeout_from_its_config(node: FakeNode) -> None:
    quick_dir, quick_cfg = node.job_dir(
        JobConfig(
            name="quick",
            health={"progress": "heartbeat", "hang_timeout_s": 12, "startup_timeout_s": 12},
            restart=REQUEUE,
        )
    )
    slow_dir, slow_cfg = node.job_dir(
        JobConfig(name="slow", health={"progress": "heartbeat", "hang_timeout_s": 20, "startup_timeout_s": 40})
    )
    quick, slow = node.submit("quick", 0), node.submit("slow", 0)
    node.task(PID0 + 400, quick, "quick", 0, run_dir=quick_dir, config=quick_cfg)
    node.task(PID0 + 401, slow, "slow", 0, run_dir=slow_dir, config=slow_cfg)
    results = node.run(30)  # neither writes a heartbeat: only the 12 s start-up timeout has passed
    assert [(r["action"], r["target"]) for r in results if r["action"] == "requeue"] == [("requeue", str(quick))]
    assert node.slurm.job(slow).restarts == 0


def test_an_unusable_config_is_an_error_naming_it_and_the_job_gets_the_defaults(
    node: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir, config = node.job_dir({"name": "broken", "health": {"hang_timeout_s": "soon"}})
    job = node.submit("broken", 0)
    node.task(PID0 + 500, job, "broken", 0, run_dir=run_dir, config=config)
    with caplog.at_level(logging.INFO):
        node.run(5)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and str(config) in errors[0] and "health.hang_timeout_s" in errors[0], errors
    [watch] = node.loop.status()["jobs"]
    assert watch["config_error"] and watch["hang_timeout_s"] == 30.0 and watch["startup_timeout_s"] == 300.0


def test_a_config_that_appears_late_is_applied_once_read(node: FakeNode) -> None:
    run_dir = node.tmp / "runs" / "late"
    config = run_dir / "job.json"  # not written yet: the shared file system lags behind the job's start
    job = node.submit("late", 0)
    node.task(PID0 + 600, job, "late", 0, run_dir=run_dir, config=config)
    assert node.run(5) == []
    assert node.loop.status()["jobs"][0]["startup_timeout_s"] == 300.0  # the defaults meanwhile
    node.job_dir(
        JobConfig(
            name="late",
            health={"progress": "heartbeat", "hang_timeout_s": 12, "startup_timeout_s": 12},
            restart=REQUEUE,
        )
    )
    results = node.run(70)  # read again within a minute; its 12 s start-up timeout has long passed
    assert kinds(results) == ["kill_local", "requeue"]
    requeue = next(json.loads(x) for x in node.lines if json.loads(x)["action"] == "requeue")
    assert "startup_timeout_s 12" in requeue["reason"]


def vm_fault(gpu: int, pid: int) -> GpuObservation:
    """A GPU VM fault as the GPU check reports it (supervisor/gpu/assess.py), naming the faulting pid."""
    reason = f"GPU {gpu} GPU VM fault (pid {pid:#x} python)"
    values = {"problems": ["vmfault"], "events": [{"event": "VMFAULT", "message": f"{pid:x}:python"}]}
    return GpuObservation(gpu, "fault", "vmfault", reason, values)


def test_vm_faults_of_different_users_drain_the_node_even_across_a_daemon_restart(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, health={"vm_fault_drain_after": 2, "vm_fault_window_s": 3600}, max_drain_fraction=0.5)
    try:
        run_a, config_a = node.job_dir(JobConfig(name="llama", health={**HEALTH, "progress": "off"}))
        job_a = node.submit("llama", 1)
        node.task(PID0 + 100, job_a, "llama", 1, run_dir=run_a, config=config_a)
        assert node.run(2) == []
        node.gpus.next = [vm_fault(0, PID0 + 100)]
        results = node.run(1)
        # The first VM fault: the group whose process faulted restarts; the node stays in service.
        assert kinds(results) == ["kill_local", "requeue"], results
        assert node.slurm.job(job_a).restarts == 1 and not node.slurm.node("n1").is_drained
        node.gone(PID0 + 100, returncode=-9)
        node.run(1)
        node.slurm.cancel(job_a)  # its node free for the next job (the fake runs one job per node)

        node.close()  # the daemon restarts: the VM fault history must come back with its state
        node.start()
        assert [j for _, j in node.loop.policy.vm_faults] == ["uid:0"]

        # Another job of the same user faults: still one user, no drain (their own kernels' bug, most likely).
        run_c, config_c = node.job_dir(JobConfig(name="mistral", health={**HEALTH, "progress": "off"}))
        job_c = node.submit("mistral", 0)
        node.task(PID0 + 300, job_c, "mistral", 0, run_dir=run_c, config=config_c)
        assert node.run(2) == []
        node.gpus.next = [vm_fault(1, PID0 + 300)]
        assert kinds(node.run(1)) == ["kill_local", "requeue"]
        assert not node.slurm.node("n1").is_drained
        node.gone(PID0 + 300, returncode=-9)
        node.run(1)
        node.slurm.cancel(job_c)

        # Another user's job, and run directory (a user with a passwd entry, as Slurm's slurmstepd requires).
        other = pwd.getpwnam("nobody").pw_uid
        run_b, config_b = node.job_dir(JobConfig(name="titan", health={**HEALTH, "progress": "off"}), owner=other)
        job_b = node.submit("titan", 0, user_id=other)
        node.task(PID0 + 200, job_b, "titan", 0, run_dir=run_b, config=config_b, uid=other)
        assert node.run(2) == []
        node.gpus.next = [vm_fault(3, PID0 + 200)]
        results = node.run(1)
        # A second user's job faults on this node: two different users within the window -> the node is drained.
        assert kinds(results) == ["kill_local", "drain", "requeue"], results
        assert node.slurm.node("n1").is_drained
        assert node.loop.policy.vm_faults == ()

        # Each job's run directory holds the lines about it, from which `lamplighter why` answers.
        lines_a = [json.loads(x) for x in (run_a / "actions.jsonl").read_text().splitlines()]
        assert [(r["action"], r["group"], r["jobs"][0]["attempt"]) for r in lines_a] == [
            ("kill_local", "llama/g1", 0),
            ("requeue", "llama/g1", 0),
        ]
        lines_b = [json.loads(x) for x in (run_b / "actions.jsonl").read_text().splitlines()]
        assert [r["action"] for r in lines_b] == ["kill_local", "drain", "requeue"]
        assert lines_b[1]["jobs"] == [{"job_id": str(job_b), "group": "titan/g0", "attempt": 0}]
        assert (run_b / "actions.jsonl").stat().st_uid == other  # written as the job's user, not as root
    finally:
        node.close()
        node.remove()


def test_thermal_throttling_is_reported_and_nothing_else(node: FakeNode) -> None:
    run_dir, config = node.job_dir(JobConfig(name="llama", health={**HEALTH, "progress": "off"}))
    job = node.submit("llama", 1)
    node.task(PID0 + 100, job, "llama", 1, run_dir=run_dir, config=config)
    node.gpus.next = [
        GpuObservation(2, "fault", "thermal-throttle", "GPU 2 thermal throttling", {"problems": ["thermal-throttle"]})
    ]
    results = node.run(1)
    assert kinds(results) == ["report"] and results[0]["outcome"] == "reported"
    assert node.slurm.job(job).restarts == 0 and not node.slurm.node("n1").is_drained
    assert json.loads(node.lines[0])["reason"] == "GPU 2 thermal throttling: reported, not acted on"


def test_an_exit_reported_after_its_process_left_proc_is_judged_by_the_jobs_own_policy(node: FakeNode) -> None:
    """Found by the soak: the process was gone from /proc a cycle before its pidfd reported the exit, the
    job's settings were forgotten meanwhile, and the exit was judged by the default budget (10, not 1000)."""
    run_dir, config = node.job_dir(
        JobConfig(name="strict", health={**HEALTH, "progress": "off"}, restart={"budget_per_group": 0})
    )
    job = node.submit("strict", 0)
    pid = PID0 + 700
    node.task(pid, job, "strict", 0, run_dir=run_dir, config=config)
    assert node.run(2) == []
    for f in (node.proc / str(pid)).iterdir():  # out of /proc, its exit not reported yet
        f.unlink()
    (node.proc / str(pid)).rmdir()
    assert node.run(1) == []
    node.slurm.finish(job, exit_code=1)
    node.exits.exit(pid, 1, node.clock.t)
    results = node.run(2)
    # The job's own budget of 0: given up. The default budget would have requeued it.
    assert kinds(results) == ["give_up"], results


def test_a_cancelled_job_is_not_brought_back(node: FakeNode) -> None:
    """Found by the warm-restart bench: `lamplighter cancel` ended a group, its daemon saw the trainer exit and
    requeued the CANCELLED job (Slurm requeues finished jobs too), and the group came back, again and again."""
    run_dir, config = node.job_dir(JobConfig(name="done", health={**HEALTH, "progress": "off"}))
    job = node.submit("done", 0)
    pid = PID0 + 800
    node.task(pid, job, "done", 0, run_dir=run_dir, config=config)
    assert node.run(2) == []
    node.slurm.cancel(job)
    node.gone(pid, returncode=-15)
    assert node.run(10) == []
    assert node.slurm.job(job).state == "CANCELLED" and node.slurm.job(job).restarts == 0


def test_two_daemons_watching_one_multi_node_group_count_its_failure_once(tmp_path: Path) -> None:
    """Both nodes of a 2-node group see its trainer end and both decide the requeue (the second here in observe
    mode, so that both decide before either acts, as two daemons polling at once do); the metrics, summed over
    the two daemons as a dashboard does, count one fault: the group's first node counts its job-level events."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = FakeNode(tmp_path / "a", name="n1")
    second = FakeNode(tmp_path / "b", name="n2", slurm=first.slurm, clock=first.clock, mode="observe")
    try:
        run_dir, config = first.job_dir(JobConfig(name="wide", health={**HEALTH, "progress": "off"}, restart=REQUEUE))
        script = tmp_path / "wide.sbatch"
        script.write_text("#!/bin/bash\n#SBATCH --job-name=ll-wide-g0\n#SBATCH --nodes=2\n")
        job = first.slurm.submit(script)
        assert first.slurm.job(job).node_list in ("n1,n2", "n[1-2]")
        for node, pid in ((first, PID0 + 300), (second, PID0 + 400)):
            node.task(pid, job, "wide", 0, run_dir=run_dir, config=config)
        for _ in range(2):
            first.loop.cycle()
            second.loop.cycle()
            first.clock.t += 1.0
        first.gone(PID0 + 300, returncode=1)
        second.gone(PID0 + 400, returncode=1)
        first.slurm.finish(job, exit_code=1)  # the group's step ended: Slurm ends its job FAILED
        said, done = [], []
        for _ in range(5):
            said += second.loop.cycle()
            done += first.loop.cycle()
            first.clock.t += 1.0
        assert "requeue" in kinds(said) and "requeue" in kinds(done)  # both decided it
        assert first.slurm.job(job).restarts == 1

        def faults(node: FakeNode) -> float:
            value = node.metrics.registry.get_sample_value(
                "lamplighter_faults_detected_total", {"kind": "exit", "job_name": "wide"}
            )
            return value or 0.0

        assert (faults(first), faults(second)) == (1.0, 0.0)
    finally:
        for node in (first, second):
            node.close()
        first.remove()


def test_a_trainers_exit_brings_the_next_cycles_sooner_until_slurm_says_its_job_ended(node: FakeNode) -> None:
    """Found by make scale: the exit was seen at once, then judged a whole poll interval later, and again
    another one later when Slurm had not yet ended the job: a kill took 0.2-1.3 s to act on, by the cycle's
    phase. While an exit awaits Slurm, the next cycles come 0.1, 0.2, 0.4 s later, then at the pace again."""
    run_dir, config = node.job_dir(JobConfig(name="soon", health={**HEALTH, "progress": "off"}, restart=REQUEUE))
    job = node.submit("soon", 0)
    pid = PID0 + 900
    node.task(pid, job, "soon", 0, run_dir=run_dir, config=config)
    assert node.run(2) == []
    assert node.loop.next_cycle_in(1.0) == 1.0
    node.gone(pid, returncode=-9)  # Slurm still has the job RUNNING: its end has not reached slurmctld yet
    paces = []
    for _ in range(5):
        assert node.run(0.1, step_s=0.1) == []
        paces.append(node.loop.next_cycle_in(1.0))
    assert paces == [0.1, 0.2, 0.4, 1.0, 1.0]
    node.slurm.finish(job, exit_code=137)
    assert kinds(node.run(0.1, step_s=0.1)) == ["requeue"]
    assert node.loop.next_cycle_in(1.0) == 1.0
    assert node.loop.next_cycle_in(0.05) == 0.05  # never slower than the pace
