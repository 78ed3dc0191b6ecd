"""submit -> status -> the job ends by itself (Lighthouse released) / cancel, on the real local Slurm cluster."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from lamplighter.slurm import job_cli
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.lab import leftover_job_processes
from lamplighter.slurm.slurm_report import write_report
from lamplighter.slurm.submission import find_run_dir, load, wait_ended
from lamplighter.slurm.testcluster import TestCluster, pick_port_range, slurm_installed, wait_until
from lamplighter.trainer.contract import RunPaths
from lamplighter.trainer.steplog import read_steps

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TestCluster]:
    missing = slurm_installed()
    if missing:
        pytest.skip(f"real Slurm not available: {missing}")
    c = TestCluster(tmp_path / "cluster", nodes=3)
    c.up()
    try:
        yield c
    finally:
        c.down()


def write_config(tmp: Path, name: str, steps: int, conf: Path) -> Path:
    cfg = {
        "name": name,
        "run_dir": str(tmp / name),
        "trainer": {
            "steps": steps,
            "model": {"dim": 32, "layers": 1, "heads": 2, "seq_len": 16, "batch_size": 4},
            "checkpoint": {"enabled": False},
        },
        "groups": {"count": 2, "nodes": 1},
        "lighthouse": {"host": "127.0.0.1", "port": pick_port_range(1), "placement": "slurm-job"},
        "slurm": {"requeue": True, "head_node": "n1", "slurm_conf": str(conf)},
        "health": {"hang_timeout_s": 15},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def cli(*argv: str) -> int:
    p = argparse.ArgumentParser()
    job_cli.add_parser(p.add_subparsers())
    args = p.parse_args(list(argv))
    rc: int = args.func(args)
    return rc


def test_slurm_job_completes_and_releases_its_lighthouse(
    cluster: TestCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "ends", 40, cluster.conf_path)
    assert cli("submit", str(config)) == 0
    sub = load(find_run_dir(str(config)))
    api = SlurmActions(cluster.cli())
    states = wait_ended(sub, api, 180)
    assert [states[j] for j in sub.groups.values()] == ["COMPLETED", "COMPLETED"], states
    assert sub.release_job_id is not None and states[sub.release_job_id] == "COMPLETED"
    assert sub.lighthouse_job_id is not None and states[sub.lighthouse_job_id] == "CANCELLED"
    report = write_report(sub, timeline=True)
    assert report["reached_target"] and report["steps_lost"] == 0 and report["weights_identical"]
    assert (Path(sub.run_dir) / "timeline.png").stat().st_size > 0
    wait_until(lambda: not leftover_job_processes("ends"), 20, "the job's processes to exit")
    capsys.readouterr()
    assert cli("status", str(config), "--json") == 0
    st = json.loads(capsys.readouterr().out)
    assert st["step"] == 40 and {g["state"] for g in st["groups"].values()} == {"COMPLETED"}


def test_slurm_status_then_cancel_stops_everything(
    cluster: TestCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "stop", 1_000_000, cluster.conf_path)
    assert cli("submit", str(config)) == 0
    sub = load(find_run_dir(str(config)))
    paths = RunPaths(Path(sub.run_dir))
    wait_until(
        lambda: all(any(r.committed and r.participants == 2 for r in read_steps(paths.steps(g))) for g in sub.groups),
        120,
        "both groups to commit together",
    )
    capsys.readouterr()
    assert cli("status", "--run-dir", sub.run_dir, "stop", "--json") == 0
    st = json.loads(capsys.readouterr().out)
    assert {g["state"] for g in st["groups"].values()} == {"RUNNING"}
    assert st["lighthouse"]["state"] == "RUNNING"
    assert st["quorum"] is not None and sorted(m["group"] for m in st["quorum"]["members"]) == ["stop_0", "stop_1"]
    assert cli("status", "--run-dir", sub.run_dir, "stop") == 0
    assert "quorum" in capsys.readouterr().out
    assert cli("cancel", "--run-dir", sub.run_dir, "stop") == 0
    out = capsys.readouterr().out
    assert "cancelled group 0" in out and "cancelled lighthouse" in out
    api = SlurmActions(cluster.cli())
    assert all(api.job(j).state == "CANCELLED" for j in sub.all_job_ids())
    wait_until(lambda: not leftover_job_processes("stop"), 30, "the job's processes to exit")
