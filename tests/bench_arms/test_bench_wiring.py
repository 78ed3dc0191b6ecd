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

from lamplighter.slurm.render import render_job

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


def test_a_restart_inside_the_allocation_is_a_detection_at_the_agents_notice(tmp_path: Path, bench: ModuleType) -> None:
    """Found in make bench: a kill that the in-job agent restarted read as detected 65 s later, at the next
    daemon action, because only the daemons' action logs were read."""
    from bench.lamplighter_slurm import injob_detections
    from lamplighter.injob.journal import append_event, journal_path

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


def test_every_result_file_of_one_bench_run_carries_its_stamp(
    tmp_path: Path, bench: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stamp travels in the environment, so the parts that run as processes of their own write it too.
    results_io = importlib.import_module("bench.results_io")
    monkeypatch.setenv(results_io.ENV_BENCH_RUN, "abc1234 2026-11-26T08:00:00Z")
    assert results_io.environment()["bench_run"] == "abc1234 2026-11-26T08:00:00Z"
    monkeypatch.delenv(results_io.ENV_BENCH_RUN)
    assert results_io.environment()["bench_run"] is None
