"""The smallest Slurm job a newcomer writes, on the lab whose nodes are machines of their own (a network,
host name and address each): a name, a run dir, a group count, the trainer's steps, the partition. No
Lighthouse address and no placement: the Lighthouse binds the node Slurm puts it on, and every group trains
to the target through a kill (newcomer review P1-1: with a loopback default, group 0 trained alone and every
Slurm job still ended COMPLETED)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from realparts import STEP_SLEEP_S

from lamplighter.configs.loader import load_job
from lamplighter.lab.e2e_run import LabRun
from lamplighter.lab.slurm_lab import SlurmLab
from lamplighter.rundir.contract import lighthouse_address

pytestmark = pytest.mark.integration

STEPS = 120


@pytest.mark.heavy(seconds=95)
def test_the_smallest_job_trains_every_group_through_a_kill(lab: SlurmLab, tmp_path: Path) -> None:
    cfg = {
        "name": "minimal",
        "run_dir": str(tmp_path / "runs" / "minimal"),
        "groups": {"count": 2},
        # step_sleep_s paces the reference trainer so that the kill lands mid-run, nothing else.
        "trainer": {"steps": STEPS, "model": {"step_sleep_s": STEP_SLEEP_S}},
        # slurm_conf: where the lab's Slurm is (a user's SLURM_CONF).
        "slurm": {"partition": "debug", "slurm_conf": str(lab.cluster.conf_path)},
    }
    path = tmp_path / "minimal.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = LabRun(lab, load_job(path), path)
    sub = run.submit()
    address = lighthouse_address(Path(sub.run_dir))[0]
    assert address is not None
    host = address.split("//")[1].rsplit(":", 1)[0]
    assert host in {lab.cluster.node_address(n) for n in lab.cluster.node_names}, address  # a node's, not loopback
    run.wait_all_committing()
    group, _ = run.group_on_node()
    out = run.fault("kill", group)
    assert out.recovered["t_first_commit"] is not None, out.recovered
    states = run.wait_end(300)
    assert set(states.values()) == {"COMPLETED"}, states
    for g in (0, 1):
        committed = run.committed_steps(g)
        assert committed and max(committed) >= STEPS - 1, (g, committed[-3:])
    report = run.report()
    assert report["steps_lost"] == 0 and report["weights_identical"], report
    actions = Path(sub.run_dir) / "actions.jsonl"
    assert "group_never_trained" not in (actions.read_text() if actions.exists() else "")
