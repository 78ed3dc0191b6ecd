"""A node cut off from Slurm while its trainers live: the group runs elsewhere, and the old trainers are fenced.

Real Slurm 22.05 (the test cluster, SlurmdTimeout 3 s), node daemons, the
reference trainer, 2 groups. The slurmd of group 0's node is stopped
(SIGSTOP): its step daemons and trainers live on and keep training with the
other group, while Slurm marks the node down and requeues the job, which
starts on another node. Split brain would be the old and the new attempt of
group 0 both committing in the new timeline. Asserted: the old attempt went on
committing after the node was cut off (the danger was real), then committed
nothing once the new attempt had started (its first step record), no quorum
holds steps of both attempts, the old processes are gone before slurmd
comes back (fenced by the trainer's own fence or by the node daemon), and
the job ends COMPLETED with nothing lost and identical weights.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from realparts import FAR_STEPS, STEP_SLEEP_S, require_slurm

from lamplighter.configs.schema import HealthConfig, RestartConfig
from lamplighter.lab.e2e_run import prepare_run
from lamplighter.lab.run_report import read_action_logs
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab, running_lab
from lamplighter.lab.testcluster import wait_until
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import read_steps
from lamplighter.slurm.chaos.proc_find import trainer_procs
from lamplighter.slurm.hostlist import expand_hostlist

pytestmark = pytest.mark.integration


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SlurmLab]:
    require_slurm()
    with running_lab(
        tmp_path / "lab",
        LabSettings(
            compute_nodes=3,
            gpus_per_node=2,
            health=HealthConfig(hang_timeout_s=15.0, poll_interval_s=0.5),
            restart=RestartConfig(budget_per_group=10, crash_loop_max=10),
        ),
    ) as lab:
        yield lab


def alive(procs: list[tuple[int, float]]) -> list[int]:
    out = []
    for pid, created in procs:
        try:
            if psutil.Process(pid).create_time() == created:
                out.append(pid)
        except psutil.Error:
            continue
    return out


@pytest.mark.heavy(seconds=95)
def test_a_node_cut_off_from_slurm_has_its_old_trainers_fenced(lab: SlurmLab, tmp_path: Path) -> None:
    slurm_lab, port = lab, lab.job_port
    run = prepare_run(
        slurm_lab, tmp_path, name="split", steps=FAR_STEPS, groups=2, port=port, step_sleep_s=STEP_SLEEP_S
    )
    sub = run.submit()
    run.wait_all_committing()
    group, node = run.group_on_node(prefer=0)
    jid = sub.groups[group]
    old_attempt = run.api.job(jid).restarts
    old = [(p.pid, psutil.Process(p.pid).create_time()) for p in trainer_procs("split", group)]
    assert old, "no trainer process of the group found"
    paths = RunPaths(Path(sub.run_dir))

    t_cut = time.time()
    slurm_lab.cluster.silence_node(node)
    try:

        def moved() -> bool:
            info = run.api.job(jid)
            return (
                info.restarts > old_attempt
                and info.state == "RUNNING"
                and node not in expand_hostlist(info.node_list or "")
            )

        wait_until(moved, 120, f"group {group} to run again on another node than {node}")
        wait_until(
            lambda: any(r.committed and r.attempt > old_attempt for r in read_steps(paths.steps(group))),
            120,
            f"the new attempt of group {group} to commit",
        )
        wait_until(lambda: not alive(old), 60, f"the old trainers of group {group} on {node} to be fenced")
    finally:
        slurm_lab.cluster.silence_node(node, silent=False)
    states = run.finish(600)
    report = run.report()

    recs = read_steps(paths.steps(group))
    new_start = min(r.t for r in recs if r.attempt > old_attempt)
    old_commits = [r for r in recs if r.committed and r.attempt == old_attempt]
    # The danger was real: cut off from Slurm, the old trainers went on committing...
    assert any(r.t > t_cut for r in old_commits), "the old attempt never committed after its node was cut off"
    # ...and stopped before the new attempt's first step: never two attempts of one group in one timeline.
    late = [(r.step, round(r.t - new_start, 3)) for r in old_commits if r.t >= new_start]
    assert late == [], f"the stale attempt committed after the new one started: {late}"
    quorums: dict[int, set[int]] = {}
    for r in recs:
        if r.committed:
            quorums.setdefault(r.quorum_id, set()).add(r.attempt)
    assert all(len(a) == 1 for a in quorums.values()), quorums
    fenced_by_daemon = [
        a for a in read_action_logs(slurm_lab.action_logs()) if str(a.get("reason", "")).startswith("FENCED")
    ]
    log = "".join(p.read_text(errors="replace") for p in (Path(sub.run_dir) / "logs").glob(f"g{group}-*.out"))
    # Whoever gets there first ends the stale attempt: the node daemon, the trainer's own fence check, or
    # srun, told by the controller of the node's failure, through the node's step daemon (alive: only
    # slurmd is silenced). A CI run saw srun first. The split-brain checks above hold either way.
    by_srun = "srun: error: Node failure" in log
    assert fenced_by_daemon or "fenced:" in log or by_srun, "nobody ended the stale trainers"
    print(f"fenced by the daemon: {len(fenced_by_daemon)}; by the trainer itself: {'fenced:' in log}; srun: {by_srun}")
    assert set(states.values()) == {"COMPLETED"}, states
    assert report["reached_target"] and report["steps_lost"] == 0 and report["weights_identical"], report
