"""A group job that ended FAILED with nobody to requeue it is requeued by the head (soak finding).

A GPU fault moved group 2 off its node; 0.2 s into its new attempt a kill
struck its trainer, before the new node's daemon had seen it. The batch script
exited 137, Slurm recorded the job FAILED, and the job trained on with two
groups: no daemon had a trainer failure to act on.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from lamplighter.configs.schema import JobConfig, NodeConfig, RestartConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.rundir.actions import ActionLog
from lamplighter.rundir.contract import RunPaths
from lamplighter.slurm.parsers import parse_scontrol_job, parse_squeue
from lamplighter.slurm.submit.submission import submit_job
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.head.failed_jobs import FailedAttempt, exit_status, gave_up, group_of, judge, run_dir_of
from lamplighter.supervisor.head.loop import FAILED_GRACE_S, HeadLoop
from lamplighter.supervisor.state_store import DaemonState

RECORDED = Path(__file__).parents[1] / "slurm" / "recorded"


class Clock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_recorded_failed_job_reads_as_its_status_node_and_script() -> None:
    queue = parse_squeue((RECORDED / "squeue_states_failed.txt").read_text())
    assert [(e.job_id, e.state, e.reason) for e in queue] == [
        (1, "FAILED", "JobLaunchFailure"),
        (2, "FAILED", "NonZeroExitCode"),
    ]
    info = parse_scontrol_job((RECORDED / "scontrol_show_job_failed_nonzero.txt").read_text())
    assert (info.state, info.restarts, info.batch_host, exit_status(info)) == ("FAILED", 0, "n1", 137)
    assert info.fields["Command"] == "/tmp/rec/run/sbatch/group-1.sbatch"
    assert run_dir_of(info) is None  # no job.json beside that script: not a lamplighter run directory
    assert group_of("ll-soak-g12") == 12 and group_of("ll-soak-lighthouse") is None


def test_run_dir_of_needs_a_rendered_script_beside_its_config(tmp_path: Path) -> None:
    info = parse_scontrol_job((RECORDED / "scontrol_show_job_failed_nonzero.txt").read_text())
    run = tmp_path / "run with 'quotes' $x"
    (run / "sbatch").mkdir(parents=True)
    script = run / "sbatch" / "group-1.sbatch"
    info = replace(info, fields={**info.fields, "Command": str(script)})
    assert run_dir_of(info) is None
    (run / "job.json").write_text("{}")
    assert run_dir_of(info) == run
    assert run_dir_of(replace(info, fields={**info.fields, "Command": str(run / "group-1.sbatch")})) is None


def attempt(**kw: object) -> FailedAttempt:
    base = FailedAttempt(job_id=7, group=2, attempt=1, status=137, node="n3", restart=RestartConfig())
    return replace(base, **kw)  # type: ignore[arg-type]


def test_judge_follows_the_jobs_restart_policy() -> None:
    assert judge(0.0, attempt()).requeue
    assert "restart 2/" in judge(0.0, attempt()).reason
    assert not judge(0.0, attempt(completed=True)).requeue
    assert not judge(0.0, attempt(given_up=True)).requeue
    assert not judge(0.0, attempt(status=78)).requeue  # the trainer said a restart cannot help
    budget = RestartConfig(budget_per_group=3)
    assert not judge(0.0, attempt(attempt=3, restart=budget)).requeue
    assert "budget" in judge(0.0, attempt(attempt=3, restart=budget)).reason
    assert judge(0.0, attempt(attempt=3, renewals=1, restart=budget)).requeue  # renewals are not failures
    slow = RestartConfig(backoff_initial_s=4.0)
    assert judge(0.0, attempt(attempt=0, restart=slow)).delay_s == 4.0


def test_a_give_up_is_read_from_the_run_directorys_actions(tmp_path: Path) -> None:
    log = tmp_path / "actions.jsonl"
    assert not gave_up(log, 7, 1)
    lines = [
        {"action": "requeue", "jobs": [{"job_id": "7", "group": "j/g2", "attempt": 1}]},
        {"action": "give_up", "jobs": [{"job_id": "7", "group": "j/g2", "attempt": 0}]},
    ]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines) + "not json\n")
    assert not gave_up(log, 7, 1)
    with log.open("a") as f:
        f.write(json.dumps({"action": "give_up", "jobs": [{"job_id": "7", "group": "j/g2", "attempt": 1}]}) + "\n")
    assert gave_up(log, 7, 1) and not gave_up(log, 8, 1)


def lab(tmp_path: Path, **job: object) -> tuple[FakeSlurm, HeadLoop, Clock, dict[int, int], Path]:
    clock = Clock()
    slurm = FakeSlurm(["n1", "n2", "n3", "n4"], clock=clock)
    cfg = JobConfig.model_validate(
        {"name": "soak", "run_dir": str(tmp_path / "run"), "groups": {"count": 2}, "lighthouse": {"port": 29598}, **job}
    )
    sub = submit_job(
        cfg, slurm, config_path="x.yaml", probe=lambda _a: None, read_address=lambda _r, _j: "http://n1:29598"
    )
    node = NodeConfig.model_validate({"role": "head", "state_dir": str(tmp_path / "state")})
    executor = Executor(DaemonState.load(tmp_path / "head"), slurm, None, ActionLog("head", lambda line: None))
    return slurm, HeadLoop(node, slurm, executor, clock, tmp_path / "logs"), clock, sub.groups, tmp_path / "run"


def past_the_grace(head: HeadLoop, clock: Clock) -> None:
    head.cycle()
    clock.t += FAILED_GRACE_S
    head.cycle()


def test_the_head_requeues_a_group_job_that_failed_unseen(tmp_path: Path) -> None:
    slurm, head, clock, groups, _ = lab(tmp_path)
    job = groups[1]
    slurm.finish(job, exit_code=137)
    head.cycle()
    assert slurm.job(job).state == "FAILED"  # its node's daemon may still requeue it: it goes first
    clock.t += FAILED_GRACE_S
    head.cycle()
    info = slurm.job(job)
    assert (info.state, info.restarts) == ("RUNNING", 1)
    slurm.finish(job, exit_code=137)  # its next attempt fails the same way: judged as a new attempt
    head.cycle()
    clock.t += FAILED_GRACE_S
    head.cycle()
    assert (slurm.job(job).state, slurm.job(job).restarts) == ("RUNNING", 2)
    head.cycle()  # nothing failed since: nothing requeued twice
    assert slurm.job(job).restarts == 2


def test_a_failed_job_its_daemon_requeued_is_left_to_it(tmp_path: Path) -> None:
    slurm, head, clock, groups, _ = lab(tmp_path)
    slurm.finish(groups[0], exit_code=137)
    head.cycle()
    slurm.requeue(groups[0])  # the node daemon, within the grace
    slurm.start_now(groups[0])
    clock.t += FAILED_GRACE_S
    head.cycle()
    assert slurm.job(groups[0]).restarts == 1


def test_the_head_leaves_failed_what_the_policy_leaves(tmp_path: Path) -> None:
    slurm, head, clock, groups, run_dir = lab(tmp_path, restart={"no_restart_exit_codes": [78]})
    slurm.finish(groups[0], exit_code=78)
    past_the_grace(head, clock)
    assert slurm.job(groups[0]).state == "FAILED"
    RunPaths(run_dir).completed().write_text("group 0\n")
    slurm.finish(groups[1], exit_code=1)  # failed after the job reached its target
    past_the_grace(head, clock)
    assert slurm.job(groups[1]).state == "FAILED"
    lighthouse = next(j.job_id for j in slurm.jobs() if j.name.endswith("-lighthouse"))
    slurm.finish(lighthouse, exit_code=1)  # not a group: its own script restarts it
    past_the_grace(head, clock)
    assert slurm.job(lighthouse).state == "FAILED"


def test_a_marker_another_uid_put_in_the_run_directory_says_nothing(tmp_path: Path) -> None:
    """A shared run directory (writable by others): another user's `completed` or give_up line must not leave
    the job's failed group down."""
    import os

    slurm, head, clock, groups, run_dir = lab(tmp_path)
    forged = RunPaths(run_dir).completed()
    forged.write_text("group 0\n")
    actions = run_dir / "actions.jsonl"
    actions.write_text(json.dumps({"action": "give_up", "jobs": [{"job_id": str(groups[1]), "attempt": 0}]}) + "\n")
    for f in (forged, actions):
        os.chown(f, 4242, 4242)  # not the job's owner (root, in the fake)
    slurm.finish(groups[1], exit_code=1)
    past_the_grace(head, clock)
    assert (slurm.job(groups[1]).state, slurm.job(groups[1]).restarts) == ("RUNNING", 1)
