"""The user's whole path on the real local Slurm cluster, with faults: submit, chaos, recovery, report, cleanup.

Two runs:
- `test_slurm_node_crash_and_lighthouse_kill_without_daemons`: no node daemon;
  Slurm's own detection (SlurmdTimeout) requeues the crashed node's group, and
  the head-node Lighthouse service (systemd's Restart=always, played by the
  lab) comes back after a kill. The baseline the daemons are compared with.
- `test_slurm_e2e_every_fault_kind`: the node daemons on every node; one fault
  of each kind, one at a time.
Both print their per-fault numbers (run pytest with -s to see them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from realparts import FAR_STEPS, STEP_SLEEP_S, require_slurm

from lamplighter.configs.schema import HealthConfig, RestartConfig
from lamplighter.lab.e2e_run import LabRun, drained_nodes, per_kind_lines, prepare_run
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab, leftover_job_processes, running_lab
from lamplighter.lab.testcluster import wait_until
from lamplighter.slurm.chaos.inject import inject

pytestmark = pytest.mark.integration


def settings() -> LabSettings:
    return LabSettings(
        compute_nodes=6,
        gpus_per_node=2,
        health=HealthConfig(hang_timeout_s=8.0, poll_interval_s=0.5, probe_deadline_s=2.0),
        restart=RestartConfig(budget_per_group=10, crash_loop_max=10),
    )


@pytest.fixture
def lab_root(tmp_path: Path) -> Path:
    require_slurm()
    return tmp_path


@pytest.fixture
def lab_without_daemons(lab_root: Path) -> Iterator[SlurmLab]:
    with running_lab(lab_root / "lab", settings(), daemons=False) as lab:
        yield lab


@pytest.fixture
def lab_with_daemons(lab_root: Path) -> Iterator[SlurmLab]:
    with running_lab(lab_root / "lab", settings()) as lab:
        yield lab


def check_clean_end(run: LabRun, report: dict[str, object], states: dict[int, str]) -> None:
    assert run.sub is not None
    # Every job COMPLETED, the Lighthouse job too: it ended itself once every group had.
    assert run.sub.lighthouse_job_id in states and set(states.values()) == {"COMPLETED"}, states
    assert report["reached_target"], report["steps_committed"]
    assert report["steps_lost"] == 0, report["lost_step_numbers"]
    assert report["weights_identical"], report["hash_mismatches"]
    wait_until(lambda: not leftover_job_processes(run.job.name), 30, "every process of the job to exit")
    assert not run.api.jobs(f"ll-{run.job.name}-"), "Slurm jobs left in the queue"


def check_healed(run: LabRun, group: int) -> None:
    """The group's first commit after its restart was a heal, and its state equals its peers' at that step."""
    # A heal counts as checked once a peer's record of a step at or after it is in (written a moment apart).
    wait_until(lambda: run.report()["weights_identical"] is not None, 60, "a step after the heal compared")
    report = run.report()
    assert report["weights_identical"], report["hash_mismatches"]
    assert report["groups"][str(group)]["heals"] >= 1


@pytest.mark.heavy(seconds=94)
def test_slurm_node_crash_and_lighthouse_kill_without_daemons(lab_without_daemons: SlurmLab, tmp_path: Path) -> None:
    lab, port = lab_without_daemons, lab_without_daemons.job_port
    run = prepare_run(lab, tmp_path, name="base", steps=FAR_STEPS, groups=2, port=port, step_sleep_s=STEP_SLEEP_S)
    run.submit()
    run.wait_all_committing()
    group, node = run.group_on_node()
    crash = run.fault("node-crash", group)
    assert crash.recovered["t_first_commit"] is not None, crash.recovered
    assert crash.recovered["node_after"] != [node]
    check_healed(run, group)
    lab.restart_node(node)
    lh = run.fault("lighthouse-kill", None, recovery_timeout=60)
    assert lh.recovered["t_first_commit"] is not None, lh.recovered
    states = run.finish(300)
    report = run.report()
    print("\n" + "\n".join(per_kind_lines(report)))
    check_clean_end(run, report, states)
    assert drained_nodes(run) == {}


@pytest.mark.heavy(seconds=126)
def test_slurm_e2e_every_fault_kind(lab_with_daemons: SlurmLab, tmp_path: Path) -> None:
    lab, port = lab_with_daemons, lab_with_daemons.job_port
    run = prepare_run(lab, tmp_path, name="e2e", steps=FAR_STEPS, groups=3, port=port, step_sleep_s=STEP_SLEEP_S)
    run.submit()
    run.wait_all_committing()
    # Some fault-free steps first: the report's goodput baseline.
    wait_until(lambda: min(len(run.committed_steps(g)) for g in range(3)) >= 30, 120, "30 fault-free steps")
    gpu_node: str | None = None
    for i, kind in enumerate(("kill", "hang", "gpu", "node-crash", "lighthouse-kill", "supervisor-kill")):
        # A different group each time: the daemon keeps a requeued job off every node it failed on.
        group, node = run.group_on_node(exclude={gpu_node} if gpu_node else None, prefer=i % 3)
        target = None if kind == "lighthouse-kill" else group
        out = run.fault(kind, target)
        assert out.recovered["t_first_commit"] is not None, (kind, out.recovered)
        if kind in ("kill", "hang", "gpu", "node-crash"):
            check_healed(run, group)
        if kind == "gpu":
            gpu_node = node
        if kind == "node-crash":
            lab.restart_node(node)
        if kind == "supervisor-kill":
            lab.wait_daemons_alive()
    drained = drained_nodes(run)
    states = run.finish(420)
    report = run.report(extra={"drained_nodes": drained})
    print("\n" + "\n".join(per_kind_lines(report)))
    check_clean_end(run, report, states)
    assert set(drained) == {gpu_node}, drained
    assert all(f["t_detected"] is not None for f in report["faults"]), report["faults"]


def action_lines(lab: SlurmLab) -> list[dict[str, object]]:
    import json

    return [json.loads(line) for p in lab.action_logs() for line in p.read_text().splitlines() if line.strip()]


@pytest.mark.heavy(seconds=30)
def test_observe_mode_takes_no_action_on_any_fault_and_logs_each_it_would_have_taken(
    lab_root: Path, tmp_path: Path
) -> None:
    """deploy/README.md's rollout week: every node daemon and the head in `mode: observe` on the lab, a network
    per node. A hang, a GPU fault, a node crash and a killed daemon: root drains, requeues, kills and marks
    down nothing (what recovers is Slurm's own, and the job's in-job agent, the user's), and each action it
    would have taken is in the action logs as `observed`."""
    with running_lab(lab_root / "lab", replace(settings(), mode="observe")) as lab:
        run = prepare_run(
            lab, tmp_path, name="obs", steps=FAR_STEPS, groups=3, port=lab.job_port, step_sleep_s=STEP_SLEEP_S
        )
        run.submit()
        run.wait_all_committing()
        # Until the job has shown its pace, a silence is judged by startup_timeout_s (progress_pace.py).
        wait_until(lambda: min(len(run.committed_steps(g)) for g in range(3)) >= 20, 120, "20 fault-free steps")
        assert run.sub is not None
        would = {"hang": {"kill_local"}, "gpu": {"drain", "requeue"}, "node-crash": {"drain", "mark_down"}}
        struck: dict[str, tuple[int, str]] = {}
        for i, kind in enumerate(("hang", "gpu", "node-crash")):
            group, node = run.group_on_node(exclude={n for _, n in struck.values()}, prefer=i)
            inject(run.ctx, kind, group)
            struck[kind] = (group, node)

            def seen(kind: str = kind, node: str = node, group: int = group) -> set[str]:
                job = str(run.sub.groups[group])  # type: ignore[union-attr]
                return {
                    str(r["action"])
                    for r in action_lines(lab)
                    if r.get("outcome") == "observed" and (r["target"] in (node, job) or r.get("node") == node)
                }

            wait_until(lambda s=seen, k=kind: would[k] & s(), 90, f"the daemons to log what they would do on {kind}")
        lab.restart_node(struck["node-crash"][1])
        inject(run.ctx, "supervisor-kill", struck["hang"][0])
        lab.wait_daemons_alive()  # systemd's restart; its recovery of pending actions is in observe mode too
        lines = action_lines(lab)
        acted = [r for r in lines if r.get("outcome") not in ("observed", "logged", "reported")]
        assert acted == [], acted
        observed = {str(r["action"]) for r in lines if r.get("outcome") == "observed"}
        assert {"kill_local", "drain"} <= observed, observed
        assert all(str(r["reason"]).startswith("would ") for r in lines if r.get("outcome") == "observed")
        assert drained_nodes(run) == {}, drained_nodes(run)  # Slurm's own DOWN for the crash is not a drain
        for kind in ("hang", "gpu"):  # never requeued: lamplighter moved neither
            group, _ = struck[kind]
            assert run.api.job(run.sub.groups[group]).restarts == 0, kind
