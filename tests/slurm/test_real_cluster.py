"""Rendered jobs on the real Slurm test cluster: run, requeue, drain, node crash."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from slurm_jobs import group_script, wait_record

from lamplighter.lab.testcluster import TestCluster, is_alive, running_cluster
from lamplighter.rundir import contract
from lamplighter.slurm.actions import SlurmActions, poll_job
from lamplighter.slurm.requeue import requeue_now
from lamplighter.slurm.run import SlurmError

pytestmark = pytest.mark.integration
WAIT = 60.0


def test_group_job_runs_and_requeue_counts_attempts(clean_slurm_cluster: TestCluster, tmp_path: Path) -> None:
    api = SlurmActions(clean_slurm_cluster.cli())
    script, run_dir = group_script(tmp_path, slurm={"extra_sbatch": ["--comment=lamplighter,test"]})
    jid = api.submit(script)
    job = poll_job(api, jid, lambda j: j.running, WAIT, "RUNNING")
    assert job.name == "ll-t-g0" and job.restarts == 0 and job.requeue
    assert job.fields["Comment"] == "lamplighter,test"
    assert [e.job_id for e in api.jobs(name_prefix="ll-t-")] == [jid]
    rec = wait_record(run_dir, 0)
    env = rec["env"]
    assert env[contract.ENV_ATTEMPT] == "0" and "SLURM_RESTART_COUNT" not in env
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("0", "1", "0")
    assert env[contract.ENV_RUN_DIR] == str(run_dir) and env["SLURM_JOB_ID"] == str(jid)
    assert rec["argv"][1:] == [str(run_dir), "0"]

    requeue_now(api, jid)
    job = poll_job(api, jid, lambda j: j.running and j.restarts == 1, WAIT, "RUNNING again")
    assert wait_record(run_dir, 100)["env"]["SLURM_RESTART_COUNT"] == "1"
    # Both runs' output went to the one appended log in the run dir.
    assert list((run_dir / "logs").glob(f"g0-{jid}.out"))


def test_drained_node_gets_no_requeued_job(clean_slurm_cluster: TestCluster, tmp_path: Path) -> None:
    api = SlurmActions(clean_slurm_cluster.cli())
    script, run_dir = group_script(tmp_path)
    jid = api.submit(script)
    first = poll_job(api, jid, lambda j: j.running, WAIT, "RUNNING").node_list
    assert first is not None
    api.drain(first, "lamplighter test: ECC uncorrectable gpu0")
    node = api.node(first)
    assert node.is_drained and node.reason == "lamplighter test: ECC uncorrectable gpu0"
    requeue_now(api, jid)
    job = poll_job(api, jid, lambda j: j.running and j.restarts == 1, WAIT, "RUNNING elsewhere")
    assert job.node_list != first
    wait_record(run_dir, 100)
    api.resume(first)
    assert api.node(first).available or not api.node(first).is_drained


@pytest.mark.heavy(seconds=19)
def test_node_crash_requeues_automatically_and_no_requeue_job_fails(
    clean_slurm_cluster: TestCluster, tmp_path: Path
) -> None:
    api = SlurmActions(clean_slurm_cluster.cli())
    script, _ = group_script(tmp_path, name="a")
    jid = api.submit(script)
    node = poll_job(api, jid, lambda j: j.running, WAIT, "RUNNING").node_list
    assert node is not None
    script_b, _ = group_script(tmp_path, name="b", slurm={"requeue": False, "extra_sbatch": [f"--nodelist={node}"]})
    jid_b = api.submit(script_b)
    poll_job(api, jid_b, lambda j: j.running, WAIT, "RUNNING")
    clean_slurm_cluster.crash_node(node)
    # SlurmdTimeout=3: Slurm notices in ~10 s, requeues, BeginTime passes ~6 s later.
    job = poll_job(api, jid, lambda j: j.running and j.restarts == 1, WAIT, "requeued and RUNNING elsewhere")
    assert job.node_list != node
    assert api.job(jid_b).state == "NODE_FAIL"
    assert api.node(node).is_down


def test_node_crash_marked_down_by_a_watcher(clean_slurm_cluster: TestCluster, tmp_path: Path) -> None:
    api = SlurmActions(clean_slurm_cluster.cli())
    script, run_dir = group_script(tmp_path)
    jid = api.submit(script)
    node = poll_job(api, jid, lambda j: j.running, WAIT, "RUNNING").node_list
    assert node is not None
    clean_slurm_cluster.crash_node(node)
    api.mark_down(node, "lamplighter test: node silent")
    api.start_now(jid)
    job = poll_job(api, jid, lambda j: j.running and j.restarts == 1, WAIT, "RUNNING elsewhere")
    assert job.node_list != node
    wait_record(run_dir, 100)
    n = api.node(node)
    assert n.is_down and n.reason == "lamplighter test: node silent"
    clean_slurm_cluster.restart_node(node)
    assert clean_slurm_cluster.node_alive(node)


def test_errors_carry_slurms_message(slurm_cluster: TestCluster) -> None:
    api = SlurmActions(slurm_cluster.cli())
    with pytest.raises(SlurmError, match="Invalid job id specified") as e:
        api.job(999999)
    assert e.value.returncode == 1 and "scontrol" in e.value.argv[0]
    with pytest.raises(SlurmError, match="Node n99 not found"):
        api.node("n99")
    with pytest.raises(SlurmError, match="Invalid node name"):
        api.drain("n99", "x")


def test_two_clusters_at_once_and_down_from_a_fresh_process(slurm_cluster: TestCluster, tmp_path: Path) -> None:
    with running_cluster(tmp_path / "second", nodes=1) as second:
        assert second.base_port != slurm_cluster.base_port
        api2 = SlurmActions(second.cli())
        script, _ = group_script(tmp_path, name="second")
        jid = api2.submit(script)
        poll_job(api2, jid, lambda j: j.running, WAIT, "RUNNING")
        assert [n.name for n in second.node_infos()] == ["n1"]
        assert not SlurmActions(slurm_cluster.cli()).jobs(name_prefix="ll-second-")
        started = second.records()
        assert set(started) == {"munged", "slurmctld", "node-n1"}
        code = (
            "import sys; from pathlib import Path; from lamplighter.lab.testcluster import TestCluster; "
            "TestCluster(Path(sys.argv[1])).down()"
        )
        subprocess.run([sys.executable, "-c", code, str(second.root)], check=True, timeout=60)
        assert second.records() == {}
        assert not any(is_alive(r) for r in started.values())
        # Up again at the same root, as `make bench` does arm after arm (the last up's spool link was left behind).
        second.up()
        assert [n.name for n in second.node_infos()] == ["n1"]
    # The first cluster is untouched.
    slurm_cluster.wait_nodes_ready(10)
