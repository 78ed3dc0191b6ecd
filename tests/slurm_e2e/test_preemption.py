"""Preemption as docs/queues.md says it goes (PreemptMode=REQUEUE): Slurm requeues the preempted groups itself,
lamplighter takes no action of its own (no drain, no requeue, no kill), the others train on, and the preempted
groups heal from them when the preempting job is gone; then every group at once, none left to heal from: the
reference trainer loads the fallback checkpoint and redoes the steps since, which the report counts.

The lab's `urgent` partition preempts `debug` (lab/testcluster_conf.py); the preempting job takes the groups'
nodes whole (--exclusive), as a higher-priority user's job would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lamplighter.configs.loader import load_job
from lamplighter.lab.e2e_run import LabRun, lab_job_config
from lamplighter.lab.slurm_lab import SlurmLab
from lamplighter.lab.testcluster import wait_until
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.hostlist import expand_hostlist

pytestmark = pytest.mark.integration
STEPS = 100_000  # ended through the stop-at file once both preemptions are recovered


def group_nodes(run: LabRun) -> dict[int, str]:
    assert run.sub is not None
    out = {}
    for g, jid in run.sub.groups.items():
        info = run.api.job(jid)
        if info.state == "RUNNING" and info.node_list:
            out[g] = expand_hostlist(info.node_list)[0]
    return out


def preempt(lab: SlurmLab, nodes: list[str]) -> str:
    """A job of the urgent partition on these nodes, whole; its id once it runs (the groups there preempted)."""
    argv = ["--parsable", "-p", "urgent", "--exclusive", f"-N{len(nodes)}", f"-w{','.join(nodes)}"]
    out = lab.cluster.cli().run("sbatch", *argv, "-J", "urgent", "-o", "/dev/null", "--wrap", "sleep 600")
    job_id = out.strip().split(";")[0]
    wait_until(lambda: run_api(lab).job(int(job_id)).state == "RUNNING", 60, "the urgent job to run")
    return job_id


def run_api(lab: SlurmLab) -> SlurmActions:
    return SlurmActions(lab.cluster.cli())


def end(lab: SlurmLab, job_id: str) -> None:
    lab.cluster.cli().run("scancel", job_id)


def actions(lab: SlurmLab) -> list[dict[str, object]]:
    out = []
    for path in lab.action_logs():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


@pytest.mark.heavy(seconds=160)
def test_preempted_groups_come_back_through_slurm_and_heal(lab: SlurmLab, tmp_path: Path) -> None:
    cfg = lab_job_config(lab, tmp_path / "pre", name="pre", steps=STEPS, groups=3, step_sleep_s=0.05)
    # A fallback checkpoint every few seconds (default 300 s), so that one exists when every group is preempted.
    cfg["trainer"]["checkpoint"] = {"interval_s": 3}
    path = tmp_path / "pre.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    run = LabRun(lab, load_job(path), path)
    run.submit()
    assert run.sub is not None
    run.wait_all_committing()
    placed = group_nodes(run)
    assert len(placed) == 3, placed
    restarts = {g: run.api.job(j).restarts for g, j in run.sub.groups.items()}

    # 1. Two of three groups preempted at once: the third trains alone meanwhile.
    survivor = 0
    gone = sorted(g for g in placed if g != survivor)
    seen = max(run.committed_steps(survivor))
    urgent = preempt(lab, [placed[g] for g in gone])
    for g in gone:
        wait_until(lambda g=g: run.api.job(run.sub.groups[g]).restarts > restarts[g], 60, f"Slurm to requeue group {g}")
    wait_until(lambda: max(run.committed_steps(survivor)) > seen + 20, 120, "the survivor to train on alone")
    end(lab, urgent)
    back = {g: max(run.committed_steps(g)) for g in gone}
    for g in gone:
        wait_until(
            lambda g=g: max(run.committed_steps(g)) > back[g] + 5, 180, f"preempted group {g} back and committing"
        )

    # 2. Every group at once: no live peer, so the groups load the fallback checkpoint.
    placed = group_nodes(run)
    assert len(placed) == 3, placed
    restarts = {g: run.api.job(j).restarts for g, j in run.sub.groups.items()}
    urgent = preempt(lab, sorted(set(placed.values())))
    for g in placed:
        wait_until(lambda g=g: run.api.job(run.sub.groups[g]).restarts > restarts[g], 60, f"Slurm to requeue group {g}")
    end(lab, urgent)
    top = {g: max(run.committed_steps(g)) for g in placed}
    for g in placed:
        wait_until(lambda g=g: max(run.committed_steps(g)) > top[g], 240, f"group {g} training again")

    states = run.finish(240)
    assert set(states.values()) == {"COMPLETED"}, states
    report = run.report()
    assert report["weights_identical"], report
    assert report["steps_redone_from_fallback"] > 0, report  # from the fallback, not from fresh weights

    # lamplighter acted on none of it: Slurm requeued the preempted jobs, no node was drained.
    mine = [a for a in actions(lab) if a.get("action") in ("drain", "requeue", "kill_local")]
    assert mine == [], mine
    assert not [n for n in run.api.nodes() if n.is_drained]
