"""The benchmark's wiring to lamplighter's own parts, which no unit test of those parts would notice breaking:
the poll runner's sbatch scripts and the Slurm arm's reading of the daemons' action log (each broke once in a
refactor while the benchmark sat unrun), and `make bench`'s parts and stamps."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

from lamplighter.slurm.submit.render import render_job

REPO = Path(__file__).resolve().parents[2]


# Two lines of a node daemon's actions.jsonl, recorded from a `python -m bench` run on the Slurm lab
# (observation trimmed to the fields read here).
RECORDED_ACTIONS = [
    {
        "time": "2026-11-25T22:15:05.900+00:00",
        "ts": 1795644905.9006288,
        "node": "n3",
        "action": "kill_local",
        "target": "3",
        "reason": "b-lamplighter-m3-r0 group 1 (attempt 0, pid 30041) hung: no progress for 5.0 s after step 71",
        "observation": {"type": "hang", "job_id": "3", "group": "b-lamplighter-m3-r0/g1"},
        "group": "b-lamplighter-m3-r0/g1",
    },
    {
        "time": "2026-11-25T22:15:15.877+00:00",
        "ts": 1795644915.8772326,
        "node": "n4",
        "action": "requeue",
        "target": "2",
        "reason": "b-lamplighter-m3-r0 group 0 trainer pid 31065 exited: Slurm job 2 FAILED ExitCode=137:0",
        "observation": {"type": "exit", "job_id": "2", "attempt": 3, "group": "b-lamplighter-m3-r0/g0"},
        "group": "b-lamplighter-m3-r0/g0",
    },
]


def test_the_poll_runners_group_script_is_torchfts_examples_and_none_of_lamplighters(
    tmp_path: Path, bench: ModuleType
) -> None:
    """srun --kill-on-bad-exit of the trainer, --no-requeue, no in-job agent: a failed trainer ends its job
    and only the runner's next poll brings the group back (bench review 2026-12-01: the agent did it before)."""
    import subprocess

    from bench.baselines.poll_script import has_agent, poll_group_script
    from bench.jobspec import Workload, job_config

    job = job_config("b-poll", tmp_path / "run", Workload(steps=40, replicas=3), run_id="r", under_slurm=True)
    hostile = "http://127.0.0.1:1/'$(touch " + str(tmp_path / "pwned") + ")'"
    text = poll_group_script(job, 2, 3, tmp_path / "run" / "job.json", "/usr/bin/python3", hostile)
    assert not has_agent(text) and "lamplighter.slurm.injob" not in text and "renew" not in text
    assert "#SBATCH --no-requeue" in text and "#SBATCH --requeue" not in text
    assert '#SBATCH --job-name="ll-b-poll-g2"' in text
    assert "\nexec srun --kill-on-bad-exit=1 /usr/bin/python3 -m bench.gpu_time_trainer" in text
    assert "LAMPLIGHTER_REPLICA_ID=2\n" in text and "LAMPLIGHTER_ATTEMPT=3\n" in text
    # Every value is quoted: bash sets the hostile address as it is and runs nothing of it.
    out = subprocess.run(
        [
            "bash",
            "-c",
            "\n".join(line for line in text.splitlines() if line.startswith("export "))
            + "\nprintenv TORCHFT_LIGHTHOUSE",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == hostile and not (tmp_path / "pwned").exists()
    # lamplighter's own rendered group scripts do start the agent: the check can tell them apart.
    rendered = render_job(job, tmp_path / "sbatch")
    assert has_agent(next(p for p in rendered if p.name == "group-0.sbatch").read_text())


def test_the_in_job_arms_script_restarts_the_trainer_under_torchrun_and_nothing_of_lamplighters(
    tmp_path: Path, bench: ModuleType
) -> None:
    """torchrun --max-restarts=3 around the same trainer, in a job submitted once: what a user without lamplighter's
    daemons runs (#43 item 1); the trainer's own TCPStore gets a port of its own (MASTER_PORT=0), not torchrun's."""
    import shlex

    from bench.baselines.poll_runner import InJobRestart
    from bench.baselines.poll_script import INJOB_MAX_RESTARTS, has_agent, poll_group_script
    from bench.jobspec import Workload, job_config

    job = job_config("b-inj", tmp_path / "run", Workload(steps=40, replicas=3), run_id="r", under_slurm=True)
    text = poll_group_script(
        job, 1, 0, tmp_path / "run" / "job.json", "/usr/bin/python3", "http://h:1", max_restarts=INJOB_MAX_RESTARTS
    )
    assert not has_agent(text) and "#SBATCH --no-requeue" in text
    line = next(x for x in text.splitlines() if x.startswith("exec srun"))
    argv = shlex.split(line)
    assert argv[:4] == ["exec", "srun", "--kill-on-bad-exit=1", "/usr/bin/python3"]
    assert argv[4:6] == ["-m", "torch.distributed.run"] and "--max-restarts=3" in argv and "--nproc-per-node=1" in argv
    wrapped = argv[argv.index("--no-python") + 1 :]
    assert wrapped[:4] == ["env", "MASTER_PORT=0", "/usr/bin/python3", "-m"]  # bench.procs finds it by its module
    assert InJobRestart.max_restarts == INJOB_MAX_RESTARTS and InJobRestart.name == "in-job-restart"


def test_detections_name_the_replica_of_a_daemon_action(tmp_path: Path, bench: ModuleType) -> None:
    from bench.lamplighter_slurm import read_detections

    log = tmp_path / "actions.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in RECORDED_ACTIONS) + "not json\n")
    assert read_detections([log], None) == [(1795644905.9006288, 1), (1795644915.8772326, 0)]
    # One lab serves every run of an arm: a run reads only what was logged after its own submission.
    assert read_detections([log], None, since=1795644910.0) == [(1795644915.8772326, 0)]


def test_a_restart_inside_the_allocation_is_a_detection_at_the_agents_notice(tmp_path: Path, bench: ModuleType) -> None:
    """Found in make bench: a kill that the in-job agent restarted read as detected 65 s later, at the next
    daemon action, because only the daemons' action logs were read."""
    from bench.lamplighter_slurm import injob_detections
    from lamplighter.slurm.injob.events import append_event, journal_path

    append_event(journal_path(tmp_path, 1), "started", 90.0, how="cold", attempt=1)
    append_event(journal_path(tmp_path, 1), "ended", 100.5, status=-9)
    append_event(journal_path(tmp_path, 1), "started", 101.0, how="warm", attempt=2)
    append_event(journal_path(tmp_path, 0), "ended", 50.0, status=0)  # before this run
    assert injob_detections(tmp_path, 3, since=60.0) == [(100.5, 1)]


def test_make_bench_names_its_parts_and_refuses_an_unknown_one(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    main = importlib.import_module("bench.__main__")
    with pytest.raises(SystemExit) as e:
        main.main(["--only", "goodput,heal-speed"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown part(s) heal-speed" in err and "goodput, big, cost, model, warm" in err
    assert set(main.parts(argparse.Namespace(quick=True, big_state=1))) == set(main.PARTS + main.SEPARATE)
    # heal and stall are make targets of their own, each with its own stamp file: never mixed into a run.
    with pytest.raises(SystemExit) as e:
        main.main(["--only", "goodput,heal"])
    assert e.value.code == 2 and "a part of its own" in capsys.readouterr().err


def test_a_run_of_some_parts_leaves_the_full_runs_record_alone(bench: ModuleType) -> None:
    """`--only cost,model` at 90454b6 overwrote bench_run.json, the record of the full run the READMEs cite."""
    main = importlib.import_module("bench.__main__")
    assert main.stamp_file(list(main.PARTS)) == "bench_run"
    assert main.stamp_file(["cost", "model"]) == "bench_run_partial"
    assert main.stamp_file([p for p in main.PARTS if p != "big"]) == "bench_run_partial"  # --skip big
    assert main.stamp_file(["heal"]) == "bench_run_heal"


def test_every_result_file_of_one_bench_run_carries_its_stamp(
    tmp_path: Path, bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stamp travels in the environment, so the parts that run as processes of their own write it too.
    results_io = importlib.import_module("bench.results_io")
    monkeypatch.setenv(results_io.ENV_BENCH_RUN, "abc1234 2026-11-26T08:00:00Z")
    assert results_io.environment()["bench_run"] == "abc1234 2026-11-26T08:00:00Z"
    monkeypatch.delenv(results_io.ENV_BENCH_RUN)
    assert results_io.environment()["bench_run"] is None


def test_steps_start_on_deadlines_and_a_late_one_starts_a_new_phase(bench: ModuleType) -> None:
    """A survivor's step period is the pacer's whatever CPU its peers leave it (#43 item 3): it waits out a
    short step, and after a long one (a quorum change) it does not burst to catch up."""
    from bench.gpu_time_trainer import Pacer

    now = [100.0]
    p = Pacer(0.5, clock=lambda: now[0])
    assert p.wait_s() == 0.0  # the first step starts at once
    now[0] += 0.1  # 0.1 s of CPU work
    assert p.wait_s() == pytest.approx(0.4)
    now[0] += 0.4 + 0.05
    assert p.wait_s() == pytest.approx(0.45)
    now[0] += 0.45 + 3.0  # a 3-s stall in this step
    assert p.wait_s() == 0.0
    now[0] += 0.1
    assert p.wait_s() == pytest.approx(0.4)  # one period after the late step, not a burst of missed ones
