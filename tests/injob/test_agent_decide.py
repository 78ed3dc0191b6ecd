"""The in-job agent's decision after its trainer step ended (pure), how it builds the spare's step, and that it
starts no trainer once the job has completed."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.configs.schema import RestartConfig
from lamplighter.rundir.contract import RunPaths
from lamplighter.slurm.injob.agent import Agent, mark_completed
from lamplighter.slurm.injob.decide import SPARE_AFTER_S, AgentState, StepEnded, decide, spare_due
from lamplighter.slurm.injob.steps import TASK_MARK, StepCommand, activation_line

CFG = RestartConfig(in_job=2, crash_loop_max=3, crash_loop_window_s=100, backoff_initial_s=0)


def test_done_stop_complete_and_no_restart_codes() -> None:
    s = AgentState()
    assert decide(0.0, s, StepEnded(0), CFG)[1].action == "done"
    stop = decide(0.0, s, StepEnded(143, stopping=True), CFG)[1]
    assert (stop.action, stop.exit_status) == ("stop", 143)
    late = decide(0.0, s, StepEnded(1, completed=True), CFG)[1]
    assert (late.action, late.exit_status) == ("done", 0) and "after the job reached its target" in late.reason
    refused = decide(0.0, s, StepEnded(78), CFG)[1]
    assert (refused.action, refused.exit_status) == ("end", 78) and "no_restart_exit_codes" in refused.reason


def test_restarts_inside_the_allocation_warm_then_cold_then_the_job_ends() -> None:
    s, d = decide(10.0, AgentState(), StepEnded(137, spare_ready=True), CFG)
    assert d.action == "restart_warm" and s.in_job == 1 and "in-job restart 1/2 from the warm spare" in d.reason
    s, d = decide(20.0, s, StepEnded(1, spare_ready=False), CFG)
    assert d.action == "restart_cold" and s.in_job == 2
    s, d = decide(200.0, s, StepEnded(1, spare_ready=True), CFG)
    assert (d.action, d.exit_status) == ("end", 1) and "in_job 2" in d.reason and "node daemon to requeue" in d.reason


def test_a_crash_loop_ends_the_job_before_the_budget() -> None:
    cfg = RestartConfig(in_job=50, crash_loop_max=3, crash_loop_window_s=100)
    s = AgentState()
    actions = []
    for t in (1.0, 2.0, 3.0):
        s, d = decide(t, s, StepEnded(1), cfg)
        actions.append(d.action)
    assert actions == ["restart_cold", "restart_cold", "end"]


@pytest.mark.parametrize("in_job", [0, 150])
def test_the_budget_is_capped_for_the_attempt_numbering(in_job: int) -> None:
    cfg = RestartConfig.model_construct(**{**RestartConfig().model_dump(), "in_job": in_job, "crash_loop_max": 1000})
    s = AgentState(in_job=99)
    assert decide(0.0, s, StepEnded(1), cfg)[1].action == "end"


SRUN = ["srun", "--kill-on-bad-exit=1", "--cpus-per-task=4", "--container-image=img"]
WRAP = ["bash", "-c", 'exec "$@"', "lamplighter-task"]


def test_the_spare_is_the_trainers_step_sharing_the_allocation() -> None:
    cmd = StepCommand.split([*SRUN, *WRAP, "/venv/bin/python", "-m", "torchtitan.train", "--job.config_file=x"])
    assert cmd.why_no_spare() is None
    assert cmd.spare_argv(["torch", "torchft"]) == [
        "srun",
        "--overlap",
        "--input=all",
        *SRUN[1:],
        *WRAP,
        "/venv/bin/python",
        "-m",
        "lamplighter.launch.standby",
        "--preload",
        "torch",
        "--preload",
        "torchft",
        "--preload",
        "torchtitan.train",
    ]
    line = activation_line(cmd.trainer, {"LAMPLIGHTER_ATTEMPT": "1"}, "/work")
    assert b'"merge_env": true' in line and line.endswith(b"\n")


def test_commands_a_spare_cannot_run_start_cold_and_say_why() -> None:
    cmd = StepCommand.split([*SRUN, *WRAP, "/bin/sh", "-c", "train"])
    assert "every restart starts cold" in (cmd.why_no_spare() or "")
    with pytest.raises(ValueError, match="not an srun step"):
        StepCommand.split(["python", "-m", "x"])
    with pytest.raises(ValueError, match="no trainer command"):
        StepCommand.split([*SRUN, *WRAP])


def test_a_job_completed_while_the_agent_waited_starts_no_trainer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `completed` marker is read again before the trainer starts: a group requeued just before its peer
    reached the target, whose agent waited for the Lighthouse meanwhile, must not train from step 0 alone."""
    paths = RunPaths(tmp_path)
    agent = Agent(
        run_dir=tmp_path,
        group=1,
        command=StepCommand.split(["srun", TASK_MARK, "python", "-m", "trainer"]),
        restart=CFG,
        preload=[],
        spare_wanted=False,
        fixed_lighthouse="http://127.0.0.1:1",
        restarts=1,
        env={},
    )
    started: list[str] = []

    def peer_completes(timeout_s: float = 0.0) -> None:
        mark_completed(paths.completed(), 0)

    monkeypatch.setattr(agent, "wait_for_lighthouse", peer_completes)
    monkeypatch.setattr(agent, "start_trainer", lambda how: started.append(how))
    assert agent.run() == 0 and started == []


def make_agent(run_dir: Path, group: int) -> Agent:
    return Agent(
        run_dir=run_dir,
        group=group,
        command=StepCommand.split(["srun", TASK_MARK, "python", "-m", "trainer"]),
        restart=CFG,
        preload=[],
        spare_wanted=False,
        fixed_lighthouse="http://127.0.0.1:1",
        restarts=0,
        env={"SLURM_JOB_ID": "4242", "LAMPLIGHTER_JOB": "minimal"},
    )


def test_a_group_that_never_trained_is_said_when_the_job_completes_without_it(tmp_path: Path) -> None:
    """Newcomer review P1-1: a group that never reached the Lighthouse ended COMPLETED like its peer, which
    trained alone; `why` must say so."""
    from lamplighter.rundir.action_history import history, parse_lines

    paths = RunPaths(tmp_path)
    mark_completed(paths.completed(), 0)
    assert make_agent(tmp_path, 1).run() == 0
    records, bad = parse_lines((tmp_path / "actions.jsonl").read_text().splitlines())
    assert bad == 0 and [r["action"] for r in records] == ["group_never_trained"]
    h = history(records, {"4242": "minimal/g1"}, "minimal")
    reasons = [r["reason"] for lines in h.groups["minimal/g1"].attempts.values() for r in lines]
    assert len(reasons) == 1 and "group 1 never committed a step" in reasons[0]


def test_a_group_that_trained_says_nothing_when_the_job_completes(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    mark_completed(paths.completed(), 0)
    beat = paths.heartbeat(1, 0)
    beat.parent.mkdir(parents=True)
    beat.write_text('{"step": 12, "attempt": 0}')
    assert make_agent(tmp_path, 1).run() == 0
    assert not (tmp_path / "actions.jsonl").exists()


def test_a_torchft_trainer_that_writes_no_heartbeat_but_trained_says_nothing(tmp_path: Path) -> None:
    """Found on the lab's 2-node groups: a foreign torchft trainer writes no heartbeat, so a group that trained
    to the end was said to have never committed a step. Its Lighthouse's step log says it did."""
    paths = RunPaths(tmp_path)
    mark_completed(paths.completed(), 0)
    line = '{"t":1.0,"group":%d,"replica":"ft_%d:u","attempt":0,"step":%d,"participants":2,"quorum_id":1}\n'
    paths.lighthouse_steps().write_text(line % (0, 0, 5) + line % (1, 1, 0) + line % (1, 1, 7) + '{"t":2.0,"gro')
    assert make_agent(tmp_path, 1).run() == 0
    assert not (tmp_path / "actions.jsonl").exists()
    # The same log without a step of group 1: it never trained, and says so.
    paths.lighthouse_steps().write_text(line % (0, 0, 5) + line % (1, 1, 0))
    assert make_agent(tmp_path, 1).run() == 0
    assert "group_never_trained" in (tmp_path / "actions.jsonl").read_text()


def test_the_spare_starts_once_the_attempt_committed_or_a_minute_after_it_started() -> None:
    """deploy/README: the spare starts only once the trainer has committed a step, or 60 s after the start."""
    started = 1000.0
    assert not spare_due(started + 5, started, committed=False)  # still importing, loading data: no spare yet
    assert spare_due(started + 5, started, committed=True)
    assert not spare_due(started + SPARE_AFTER_S, started, committed=False)
    assert spare_due(started + SPARE_AFTER_S + 0.1, started, committed=False)  # a trainer that beats nothing
    assert SPARE_AFTER_S == 60.0
