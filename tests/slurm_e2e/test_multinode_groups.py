"""Multi-node, multi-process replica groups on the real test cluster, supervised by the node daemons.

Each replica group is 2 nodes x 2 ranks: srun starts one torchrun per node,
torchrun starts the ranks, the ranks form the group's own process group
(gloo, HSDP shape: gradients averaged inside the group) and torchft
replicates across groups. The trainer (tests/foreign/ft_trainer.py) imports
torchft and no lamplighter code: the daemons see its progress through the
job's Lighthouse only, and it logs its state hashes in its own files.

Each fault of the foreign trainer's job (no restarts inside the job:
restart.in_job 0) must requeue the whole group exactly once (Slurm's restart
count goes up by one); the reference trainer's job restarts a killed rank's
group inside its allocation from its warm spare step, on both of its nodes,
with no requeue. Each group must heal from its peer bit-identically (equal
hashes on every step both groups committed), and the job must end with every
group's Slurm job COMPLETED.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from realparts import FAR_STEPS, STEP_SLEEP_S, require_slurm

from lamplighter.configs.loader import load_job
from lamplighter.configs.schema import HealthConfig, RestartConfig
from lamplighter.gpusim.inject import inject as gpu_inject
from lamplighter.gpusim.state import StateDir
from lamplighter.lab.e2e_run import LabRun, lab_job_config
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab, leftover_job_processes, running_lab
from lamplighter.lab.testcluster import wait_until
from lamplighter.rundir.contract import ENV_JOB, ENV_REPLICA_ID, RunPaths
from lamplighter.rundir.stop_at import write_stop_at
from lamplighter.slurm.chaos.proc_find import find_by_env, in_trainer_steps, signal_procs
from lamplighter.slurm.hostlist import expand_hostlist

pytestmark = pytest.mark.integration
FT_TRAINER = Path(__file__).resolve().parent.parent / "foreign" / "ft_trainer.py"
STEPS = 100_000  # the test ends the run through the trainer's target file once every fault is recovered


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SlurmLab]:
    require_slurm()
    with running_lab(
        tmp_path / "lab",
        LabSettings(
            compute_nodes=6,
            gpus_per_node=2,
            health=HealthConfig(
                progress="lighthouse", hang_timeout_s=12.0, startup_timeout_s=120.0, poll_interval_s=0.5
            ),
            restart=RestartConfig(budget_per_group=10, crash_loop_max=10),
        ),
    ) as lab:
        yield lab


def foreign_job(lab: SlurmLab, work: Path, name: str) -> LabRun:
    cfg: dict[str, Any] = lab_job_config(lab, work / name, name=name, steps=STEPS, groups=2)
    # The simulated GPUs are the node's (the daemon watches them all); the test cluster has no gres to ask for.
    cfg["groups"] = {"count": 2, "nodes": 2, "procs_per_node": 1}
    cfg["trainer"] = {
        "steps": STEPS,
        "command": [
            "{python}",
            "-m",
            "torch.distributed.run",
            "--nnodes={nnodes}",
            "--nproc_per_node=2",
            "--rdzv_backend=c10d",
            "--rdzv_id={job}-{replica_id}",
            str(FT_TRAINER),
            "--group={replica_id}",
            "--steps={steps}",
            "--out={run_dir}/own",
            f"--step-sleep={STEP_SLEEP_S}",
            "--pg-timeout=3",
            "--target-file={run_dir}/own/target",
            # A rank stuck in a collective fails its peers' inner all-reduce after this long.
            "--inner-timeout=6",
        ],
    }
    # A dead node's group stops heartbeating after timeout_s; the survivor's quorum wait must outlast that.
    cfg["torchft"] = {"timeout_s": 5, "quorum_timeout_s": 10, "connect_timeout_s": 20, "pg_timeout_s": 3}
    cfg["restart"]["in_job"] = 0  # every fault is the node daemons' to requeue
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return LabRun(lab, load_job(path), path)


def own_hashes(run: LabRun) -> dict[int, dict[int, str]]:
    """step -> group -> hash, from the trainer's own logs (rank 0 of each group)."""
    out: dict[int, dict[int, str]] = {}
    for path in sorted((Path(run.job.run_dir or "") / "own").glob("g*.r0.jsonl")):
        group = int(path.name[1 : path.name.index(".")])
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            out.setdefault(rec["step"], {})[group] = rec["hash"]
    return out


def last_step(run: LabRun, group: int) -> int:
    return max((s for s, h in own_hashes(run).items() if group in h), default=0)


def restarts(run: LabRun, group: int) -> int:
    assert run.sub is not None
    return run.api.job(run.sub.groups[group]).restarts


def nodes_of(run: LabRun, group: int) -> list[str]:
    assert run.sub is not None
    info = run.api.job(run.sub.groups[group])
    return expand_hostlist(info.node_list) if info.state == "RUNNING" and info.node_list else []


def ranks(job: str, group: int, node_rank: int, local_rank: int) -> Callable[[], list[Any]]:
    """A torchrun worker of the group on its `node_rank`-th node (workers carry torchrun's LOCAL_RANK)."""

    def match(e: Any) -> bool:
        return (
            e.get(ENV_JOB) == job
            and e.get(ENV_REPLICA_ID) == str(group)
            and e.get("SLURM_NODEID") == str(node_rank)
            and e.get("LOCAL_RANK") == str(local_rank)
            and "TORCHELASTIC_RUN_ID" in e
        )

    return lambda: find_by_env(match)


def recovered_once(run: LabRun, group: int, before: int, at_step: int, timeout: float = 240.0) -> None:
    """Requeued exactly once, running again, and committing past `at_step` with its peer's state."""
    wait_until(lambda: restarts(run, group) > before, timeout, f"group {group} requeued")
    wait_until(lambda: last_step(run, group) > at_step + 20, timeout, f"group {group} committing again")
    assert restarts(run, group) == before + 1, f"group {group} requeued more than once"
    both = {s: h for s, h in own_hashes(run).items() if len(h) == 2}
    assert both and all(h[0] == h[1] for h in both.values()), "the groups disagree on a step both committed"
    assert max(both) > at_step, "no step after the heal was compared"


# No hang here: with 2 groups, a group whose stopped rank never joined the next quorum keeps heartbeating
# through its rank 0, so torchft forms no quorum for the other group either, and both time out together
# (docs/failures.md, the 2-group limit; `validate` warns). Hangs of multi-node groups are the 3-group tests'.
@pytest.mark.heavy(seconds=150)
def test_two_node_two_rank_groups_survive_kill_gpu_and_node_crash(lab: SlurmLab, tmp_path: Path) -> None:
    run = foreign_job(lab, tmp_path, "mn")
    run.submit()
    job = run.job.name
    wait_until(lambda: min(last_step(run, 0), last_step(run, 1)) >= 10, 300, "both groups committing")

    # 1. One rank on the group's second node is killed: torchrun ends its node's workers, srun the step.
    before, at = restarts(run, 0), last_step(run, 0)
    victim = ranks(job, 0, 1, 1)()
    assert len(victim) == 1 and signal_procs(victim, signal.SIGKILL)
    recovered_once(run, 0, before, at)

    # 2. A GPU of the group's second node fails: that node is drained, the whole group moves.
    before, at = restarts(run, 0), last_step(run, 0)
    second = nodes_of(run, 0)[1]
    gpu_inject(StateDir(lab.gpusim_root / second), 0, "ecc-uncorrectable")
    recovered_once(run, 0, before, at)
    assert second not in nodes_of(run, 0)
    drained = {n.name for n in run.api.nodes() if n.is_drained}
    assert drained == {second}, drained

    # 3. The group's first node crashes: the head daemon marks it down, the group runs elsewhere.
    before, at = restarts(run, 1), last_step(run, 1)
    first = nodes_of(run, 1)[0]
    lab.cluster.crash_node(first)
    recovered_once(run, 1, before, at)
    assert first not in nodes_of(run, 1)

    # Every fault recovered: both groups stop at the same step, a little ahead. The trainer reads its own
    # target file; the daemons read the job's stop-at: told the same step, they give the groups' exit
    # (torchrun and the cross-node process groups shutting down, slow on a loaded machine) the finishing
    # time, not hang_timeout_s. Told nothing, they took a slow exit for a hang and requeued both groups,
    # which, with no peer left to heal from, trained again from step 1: a real rollback of every step.
    end = max(last_step(run, 0), last_step(run, 1)) + 30
    write_stop_at(Path(run.job.run_dir or ""), end)
    (Path(run.job.run_dir or "") / "own" / "target").write_text(str(end))
    states = run.wait_end(300)
    assert run.sub is not None
    assert {states[run.sub.groups[g]] for g in (0, 1)} == {"COMPLETED"}, states
    assert last_step(run, 0) == last_step(run, 1) == end
    both = {s: h for s, h in own_hashes(run).items() if len(h) == 2}
    assert all(h[0] == h[1] for h in both.values())
    # The report reads the steps the job's Lighthouse recorded, and does not claim what it could not check.
    report = run.report()
    assert report["weights_identical"] is None and report["weights_check"].startswith("not checked")
    assert report["steps_lost"] == 0 and report["steps_committed"] >= end - 1
    assert all(report["groups"][g]["attempts"] >= 2 for g in ("0", "1"))
    # Both groups trained: no agent may say otherwise (this trainer writes no heartbeat; the Lighthouse's log).
    actions = Path(run.job.run_dir or "") / "actions.jsonl"
    assert "group_never_trained" not in (actions.read_text() if actions.exists() else "")
    wait_until(lambda: not leftover_job_processes(job), 30, "no process of the job left")


def single_node_job(lab: SlurmLab, work: Path, name: str) -> LabRun:
    """Two groups of one torchrun (one rank) each; replica names ft_trainer_0/1, the same in every job.

    They train until the test writes a target (own/target), so two jobs surely overlap."""
    cfg: dict[str, Any] = lab_job_config(lab, work / name, name=name, steps=STEPS, groups=2)
    cfg["trainer"] = {
        "steps": STEPS,
        "command": ["{python}", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", str(FT_TRAINER)]
        + ["--group={replica_id}", "--steps={steps}", "--out={run_dir}/own", f"--step-sleep={STEP_SLEEP_S}"]
        + ["--target-file={run_dir}/own/target"],
    }
    cfg["slurm"]["exclusive"] = False
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return LabRun(lab, load_job(path), path)


def recorded_replicas(run: LabRun) -> set[str]:
    """Every replica process that committed a step through this job's Lighthouse (lighthouse-steps.jsonl)."""
    text = RunPaths(Path(run.job.run_dir or "")).lighthouse_steps().read_text()
    return {json.loads(line)["replica"] for line in text.splitlines() if line.strip()}


@pytest.mark.heavy(seconds=67)
def test_two_jobs_with_the_same_replica_names_never_share_a_quorum(lab: SlurmLab, tmp_path: Path) -> None:
    a, b = single_node_job(lab, tmp_path, "job-a"), single_node_job(lab, tmp_path, "job-b")
    a.submit()
    b.submit()
    assert a.sub is not None and b.sub is not None
    assert a.sub.lighthouse_address != b.sub.lighthouse_address  # each job's own Lighthouse
    runs = (a, b)
    # Both jobs commit at the same time; then each stops 20 steps on.
    wait_until(lambda: all(last_step(r, g) >= 10 for r in runs for g in (0, 1)), 300, "both jobs committing")
    for run in runs:
        end = max(last_step(run, 0), last_step(run, 1)) + 20
        (Path(run.job.run_dir or "") / "own" / "target").write_text(str(end))
    for run in runs:
        states = run.wait_end(180)
        assert run.sub is not None and {states[run.sub.groups[g]] for g in (0, 1)} == {"COMPLETED"}, states
        # The Lighthouse job ended itself once both groups had: no job of its own to release it.
        assert run.sub.lighthouse_job_id is not None and states[run.sub.lighthouse_job_id] == "COMPLETED", states
    # Each Lighthouse only ever formed quorums of its own job's two processes (one per group).
    seen = {r.job.name: recorded_replicas(r) for r in runs}
    for name, ids in seen.items():
        assert sorted(i.split(":")[0] for i in ids) == ["ft_trainer_0", "ft_trainer_1"], (name, ids)
    assert not (seen["job-a"] & seen["job-b"])
    # And both trained the same steps together: every step both groups of a job logged agrees.
    for run in runs:
        both = {s: h for s, h in own_hashes(run).items() if len(h) == 2}
        assert len(both) >= 10 and all(h[0] == h[1] for h in both.values())


@pytest.mark.heavy(seconds=125)
def test_reference_trainer_with_two_processes_per_node_on_two_nodes(lab: SlurmLab, tmp_path: Path) -> None:
    """The reference trainer as srun tasks (no torchrun): 2 nodes x 2 processes per group, a warm spare step of
    the same shape beside each; a rank killed on a group's second node ends its step on both nodes, and the
    group's agent hands its place to the spare (one line, forwarded by srun to all four tasks): no requeue."""
    cfg: dict[str, Any] = lab_job_config(
        lab, tmp_path / "ref", name="ref", steps=FAR_STEPS, groups=2, step_sleep_s=STEP_SLEEP_S, spare=True
    )
    cfg["groups"] = {"count": 2, "nodes": 2, "procs_per_node": 2}
    path = tmp_path / "ref.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    run = LabRun(lab, load_job(path), path)
    run.submit()
    run.wait_all_committing(300)
    before, at = restarts(run, 1), max(run.committed_steps(1))

    def rank_on_second_node(e: Any) -> bool:
        return (
            e.get(ENV_JOB) == "ref"
            and e.get(ENV_REPLICA_ID) == "1"
            and e.get("SLURM_NODEID") == "1"
            and e.get("RANK") == "3"
            and "SLURM_STEP_ID" in e
        )

    journal = RunPaths(Path(run.job.run_dir or "")).root / "injob" / "g1.jsonl"
    wait_until(lambda: journal.exists() and '"spare"' in journal.read_text(), 300, "group 1's spare step started")
    victim = in_trainer_steps(find_by_env(rank_on_second_node))
    assert len(victim) == 1 and signal_procs(victim, signal.SIGKILL)
    wait_until(lambda: '"how":"warm"' in journal.read_text(), 120, "group 1 restarted from its spare")
    wait_until(lambda: max(run.committed_steps(1)) > at + 10, 240, "group 1 committing again")
    states = run.finish(600)
    assert run.sub is not None
    assert {states[run.sub.groups[g]] for g in (0, 1)} == {"COMPLETED"}, states
    assert restarts(run, 1) == before  # restarted inside its allocation: Slurm never requeued it
    report = run.report()
    assert report["steps_lost"] == 0 and report["reached_target"]
    assert report["weights_identical"] is True and report["groups"]["1"]["heals"] >= 1
