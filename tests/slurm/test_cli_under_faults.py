"""The CLI tells the truth when slurmctld stops answering, on the real test cluster: submit leaves nothing
half-submitted (or names what it could not roll back), status says UNKNOWN, cancel exits 1 naming the jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from realparts import require_netns, require_slurm, wait_for

from lamplighter.configs.schema import JobConfig
from lamplighter.lab.testcluster import TestCluster, running_cluster
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.submit.submission import SUBMISSION_FILE, SubmitError, load, submit_job

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TestCluster]:
    """A cluster of its own: this test stops its slurmctld."""
    require_slurm()
    require_netns()
    with running_cluster(tmp_path / "c", 2, netns=True) as c:
        yield c


def job_config(tmp_path: Path, conf: Path) -> tuple[JobConfig, Path]:
    data = {
        "name": "faults",
        "run_dir": str(tmp_path / "run"),
        "groups": {"count": 2},
        "lighthouse": {"host": "n1", "port": 29597},
        "trainer": {"command": ["sleep", "300"]},
        "slurm": {"slurm_conf": str(conf), "head_node": "n1"},
    }
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump(data))
    return JobConfig.model_validate(data), path


def cli(*args: str, conf: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lamplighter", *args],
        env=dict(os.environ, SLURM_CONF=str(conf)),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


@pytest.mark.heavy(seconds=26)
def test_slurmctld_stopped_part_way_through_submit(cluster: TestCluster, tmp_path: Path) -> None:
    api = SlurmActions(cluster.cli(timeout=5))
    job, config = job_config(tmp_path, cluster.conf_path)

    def lighthouse_queued_then_slurmctld_stops(line: str) -> None:
        if line.startswith("Lighthouse job") and line.endswith("submitted"):
            cluster.stop_controller()  # after the Lighthouse job, before any group job

    with pytest.raises(SubmitError) as err:
        submit_job(
            job,
            api,
            config_path=str(config),
            say=lighthouse_queued_then_slurmctld_stops,
            rollback_timeout=1.0,
        )
    msg = str(err.value)
    sub = load(tmp_path / "run")
    lh = sub.lighthouse_job_id
    assert lh is not None and sub.groups == {}
    assert f"COULD NOT CANCEL Slurm jobs [{lh}]" in msg and "lamplighter cancel faults" in msg
    assert "incomplete" in sub.extra

    status = cli("status", str(tmp_path / "run"), "--json", conf=cluster.conf_path, cwd=tmp_path)
    assert status.returncode == 1, status.stderr
    st = json.loads(status.stdout)
    assert st["lighthouse"]["state"] == "UNKNOWN" and st["slurm_error"] and "GONE" not in status.stdout
    table = cli("status", str(tmp_path / "run"), conf=cluster.conf_path, cwd=tmp_path)
    assert table.returncode == 1 and "SLURM DID NOT ANSWER" in table.stdout and "SUBMISSION INCOMPLETE" in table.stdout

    cancel = cli("cancel", str(tmp_path / "run"), conf=cluster.conf_path, cwd=tmp_path)
    assert cancel.returncode == 1
    assert f"could not cancel lighthouse: Slurm job {lh}" in cancel.stderr
    assert "nothing left to cancel" not in cancel.stdout

    cluster.start_controller()
    assert api.job(lh).state in ("PENDING", "RUNNING", "CONFIGURING")  # still there: it was really submitted
    done = cli("cancel", str(tmp_path / "run"), "--wait", "30", conf=cluster.conf_path, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"cancelled lighthouse: Slurm job {lh}" in done.stdout
    assert not api.jobs(), "nothing of the submission is left in the queue"


def test_submit_rolls_back_everything_when_slurm_answers_again(cluster: TestCluster, tmp_path: Path) -> None:
    api = SlurmActions(cluster.cli(timeout=5))
    job, config = job_config(tmp_path, cluster.conf_path)

    def slurmctld_restarts(line: str) -> None:
        if line.startswith("Lighthouse job") and line.endswith("submitted"):
            cluster.stop_controller()

    class Restarting(SlurmActions):
        """The world: an operator brings slurmctld back while submit rolls back (no sleeping in the test)."""

        def cancel(self, job_id: int) -> None:
            if not cluster.records().get("slurmctld"):
                cluster.start_controller()
            super().cancel(job_id)

    with pytest.raises(SubmitError, match="cancelled"):
        submit_job(
            job,
            Restarting(cluster.cli(timeout=5)),
            config_path=str(config),
            say=slurmctld_restarts,
            rollback_timeout=30.0,
        )
    assert not (tmp_path / "run" / SUBMISSION_FILE).exists()
    wait_for(lambda: not api.jobs(), 30, "the cancelled Lighthouse job to leave the queue")
