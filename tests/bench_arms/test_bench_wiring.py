"""The benchmark's wiring to lamplighter's own parts, which no unit test of those parts would notice breaking:
the poll runner's sbatch scripts, the Slurm arm's reading of the daemons' action log, and the rule that
picks a fault's target. Each of the three broke once in a refactor while the benchmark sat unrun."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

from lamplighter.slurm.render import render_job

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The benchmark package, which lives at the repository's top and is not installed."""
    monkeypatch.syspath_prepend(str(REPO))
    return importlib.import_module("bench")


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


def test_the_poll_runner_submits_each_group_script_and_not_the_lighthouse(tmp_path: Path, bench: ModuleType) -> None:
    from bench.baselines.poll_runner import group_scripts
    from bench.jobspec import Workload, job_config

    job = job_config("b-poll", tmp_path / "run", Workload(steps=40, replicas=3), run_id="r", under_slurm=True)
    rendered = render_job(job, tmp_path / "sbatch")
    scripts = group_scripts(rendered, 3)
    assert [p.name for p in scripts] == ["group-0.sbatch", "group-1.sbatch", "group-2.sbatch"]
    for g, p in enumerate(scripts):
        assert f"LAMPLIGHTER_REPLICA_ID={g}\n" in p.read_text()
    with pytest.raises(RuntimeError, match=r"group-3\.sbatch"):
        group_scripts(rendered, 4)


def test_detections_name_the_replica_of_a_daemon_action(tmp_path: Path, bench: ModuleType) -> None:
    from bench.lamplighter_slurm import read_detections

    log = tmp_path / "actions.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in RECORDED_ACTIONS) + "not json\n")
    assert read_detections([log], None) == [(1795644905.9006288, 1), (1795644915.8772326, 0)]
    # One lab serves every run of an arm: a run reads only what was logged after its own submission.
    assert read_detections([log], None, since=1795644910.0) == [(1795644915.8772326, 0)]


def test_a_hurt_replica_is_not_a_target_until_it_has_restarted_and_committed(bench: ModuleType) -> None:
    from bench.slurm_drive import healthy_replicas

    commits = {0: 10.0, 1: 10.0}
    started = {0: 1.0, 1: 1.0}
    assert healthy_replicas([0, 1], commits.get, started, {}, 12.0) == [0, 1]
    # Replica 1 is hung at 11.0: its process and its old commits are still there.
    assert healthy_replicas([0, 1], commits.get, started, {1: 11.0}, 12.0) == [0]
    # Restarted at 20.0, not yet committed; then committed at 21.0.
    started[1] = 20.0
    assert healthy_replicas([0, 1], commits.get, started, {1: 11.0}, 20.5) == [0]
    commits[1] = 21.0
    assert healthy_replicas([0, 1], commits.get, started, {1: 11.0}, 21.5) == [0, 1]


def test_the_lighthouse_kill_finds_the_jobs_own_lighthouse(tmp_path: Path, bench: ModuleType) -> None:
    """The Slurm arm's Lighthouse fault once killed the lab's head-node service, which jobs no longer use:
    the fault did nothing and the scenario measured nothing. It must find the job's Lighthouse by its file."""
    import subprocess
    import sys

    from bench.procs import find_lighthouse

    mine, other = str(tmp_path / "a" / "lighthouse.json"), str(tmp_path / "b" / "lighthouse.json")
    # Stand-ins with a Lighthouse's command line (python -c ignores the arguments after the code). Each says
    # "up" once running: Popen returns when the child execs, which can be before /proc shows its new argv.
    wait = "import sys; print('up', flush=True); sys.stdin.read()"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", wait, "-m", "lamplighter.supervisor.lighthouse_main", "--publish", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for path in (other, mine)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == b"up\n"
    try:
        assert find_lighthouse(mine) == procs[1].pid
        assert find_lighthouse(other) == procs[0].pid
        assert find_lighthouse(str(tmp_path / "c" / "lighthouse.json")) is None
    finally:
        for p in procs:
            p.kill()
            p.communicate()


def test_make_bench_names_its_parts_and_refuses_an_unknown_one(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    main = importlib.import_module("bench.__main__")
    with pytest.raises(SystemExit) as e:
        main.main(["--only", "goodput,heal-speed"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown part(s) heal-speed" in err and "goodput, big, model, warm, warm-slurm" in err
    assert set(main.parts(argparse.Namespace(quick=True, big_state=1))) == set(main.PARTS)


def test_every_result_file_of_one_bench_run_carries_its_stamp(
    tmp_path: Path, bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stamp travels in the environment, so the parts that run as processes of their own write it too.
    results_io = importlib.import_module("bench.results_io")
    monkeypatch.setenv(results_io.ENV_BENCH_RUN, "abc1234 2026-11-26T08:00:00Z")
    assert results_io.environment()["bench_run"] == "abc1234 2026-11-26T08:00:00Z"
    monkeypatch.delenv(results_io.ENV_BENCH_RUN)
    assert results_io.environment()["bench_run"] is None


def test_a_runs_budget_counts_from_its_first_commit_not_its_start(bench: ModuleType) -> None:
    from bench.slurm_drive import STARTUP_S, out_of_time

    # Checkpoint-restart's 10 s start-up no longer eats into its 24 s of exposure to the faults.
    assert not out_of_time(now=130.0, t_start=100.0, t_train=110.0, budget_s=24.0)
    assert out_of_time(now=134.1, t_start=100.0, t_train=110.0, budget_s=24.0)
    assert not out_of_time(now=100.0 + STARTUP_S - 1, t_start=100.0, t_train=None, budget_s=24.0)
    assert out_of_time(now=100.0 + STARTUP_S + 1, t_start=100.0, t_train=None, budget_s=24.0)
