"""submit -> status -> the job ends by itself (Lighthouse released) / cancel, on the real local Slurm cluster."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from lamplighter.commands import job as job_cli
from lamplighter.lab.run_report import write_report
from lamplighter.lab.slurm_lab import leftover_job_processes
from lamplighter.lab.testcluster import TestCluster, wait_until
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import read_steps
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.submit.submission import Submission, find_run_dir, load, wait_ended

pytestmark = pytest.mark.integration


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
        "slurm": {"requeue": True, "head_node": "n1", "slurm_conf": str(conf)},
        "health": {"hang_timeout_s": 15},
        # No node daemon runs here: a failed trainer ends its job, as with restarts left to the daemons.
        "restart": {"in_job": 0},
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


@pytest.mark.heavy(seconds=25)
def test_slurm_job_completes_and_releases_its_lighthouse(
    cluster: TestCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "ends", 40, cluster.conf_path)
    assert cli("submit", str(config)) == 0
    sub = load(find_run_dir(str(config)))
    api = SlurmActions(cluster.cli())
    states = wait_ended(sub, api, 180)
    assert [states[j] for j in sub.groups.values()] == ["COMPLETED", "COMPLETED"], states
    # The Lighthouse job ended itself once both groups had left the queue.
    assert sub.lighthouse_job_id is not None and states[sub.lighthouse_job_id] == "COMPLETED"
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


def proc_states(pids: list[int]) -> dict[int, str]:
    out = {}
    for pid in pids:
        try:
            out[pid] = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            out[pid] = "gone"
    return out


def submit_until_committing(
    cluster: TestCluster, tmp_path: Path, name: str
) -> tuple[Submission, SlurmActions, RunPaths]:
    """Submit a long job named `name` and wait (bounded) until each of its groups has committed a step."""
    config = write_config(tmp_path, name, 1_000_000, cluster.conf_path)
    assert cli("submit", str(config)) == 0
    sub = load(find_run_dir(str(config)))
    paths = RunPaths(Path(sub.run_dir))
    wait_until(
        lambda: all(any(r.committed for r in read_steps(paths.steps(g))) for g in sub.groups),
        120,
        "both groups to commit",
    )
    return sub, SlurmActions(cluster.cli()), paths


def test_slurm_chaos_hits_exactly_its_target(cluster: TestCluster, tmp_path: Path) -> None:
    """Without node daemons nothing recovers: this checks only that each injection lands where it should."""
    import sys

    from lamplighter.gpusim.state import StateDir
    from lamplighter.lab.slurm_lab import Service, ServiceRunner
    from lamplighter.slurm.chaos.inject import CHAOS_FILE, ChaosContext, inject, observe_recovery, read_records
    from lamplighter.slurm.chaos.proc_find import ENV_SUPERVISOR_NODE, trainer_procs

    sub, api, _ = submit_until_committing(cluster, tmp_path, "aim")
    for g in sub.groups:
        StateDir(tmp_path / "gpus" / api.job(sub.groups[g]).node_list).init(2)  # type: ignore[operator]
    runner = ServiceRunner(tmp_path / "services.json")
    node1 = api.job(sub.groups[1]).node_list or ""
    fake_daemon = [sys.executable, "-c", "import time; time.sleep(600)"]
    import os

    runner.add(Service("supervise", fake_daemon, dict(os.environ, **{ENV_SUPERVISOR_NODE: node1}), tmp_path / "d.log"))
    runner.run()
    ctx = ChaosContext(sub, api, gpusim_root=tmp_path / "gpus")
    try:
        g0, g1 = trainer_procs("aim", 0), trainer_procs("aim", 1)
        assert len(g0) == 1 and len(g1) == 1
        hang = inject(ctx, "hang", 1)
        assert hang["detail"]["pids"] == [g1[0].pid]
        # SIGSTOP takes effect asynchronously: poll for the stopped state.
        wait_until(lambda: proc_states([g1[0].pid])[g1[0].pid] == "T", 10, "group 1's trainer to stop")
        assert proc_states([g0[0].pid])[g0[0].pid] != "T"
        gpu = inject(ctx, "gpu", 1)
        assert StateDir(tmp_path / "gpus" / node1).read(0).ecc_ue["umc"] == 1 and gpu["node"] == node1
        sup = inject(ctx, "supervisor-kill", 1)
        assert sup["node"] == node1 and len(sup["detail"]["pids"]) == 1
        back = observe_recovery(ctx, sup, 30)
        assert back["t_running"] is not None and back["t_first_commit"] is not None
        kill = inject(ctx, "kill", 0)
        assert kill["detail"]["pids"] == [g0[0].pid]
        # No daemon here: Slurm ends the group's job and nobody requeues it.
        wait_until(
            lambda: api.job(sub.groups[0]).state in ("FAILED", "COMPLETED", "CANCELLED"), 60, "group 0's job to end"
        )
        assert [r["kind"] for r in read_records(Path(sub.run_dir) / CHAOS_FILE) if r["event"] == "injected"] == [
            "hang",
            "gpu",
            "supervisor-kill",
            "kill",
        ]
    finally:
        runner.stop()
        cli("cancel", "--run-dir", sub.run_dir, "aim")
    wait_until(lambda: not leftover_job_processes("aim"), 30, "the job's processes to exit")


def test_slurm_requeued_group_heals_from_a_live_peer_bit_identically(cluster: TestCluster, tmp_path: Path) -> None:
    """kill a group's trainer, requeue its (ended) job as the node daemon would: it heals and matches its peer."""
    from lamplighter.lab.run_report import write_report
    from lamplighter.slurm.chaos.inject import ChaosContext, inject, observe_recovery
    from lamplighter.slurm.requeue import requeue_now

    sub, api, paths = submit_until_committing(cluster, tmp_path, "heal")
    ctx = ChaosContext(sub, api)
    try:
        rec = inject(ctx, "kill", 1)
        job = sub.groups[1]
        ended = wait_until_state(api, job, ("FAILED", "COMPLETED", "CANCELLED"), 60)
        requeue_now(api, job)
        back = observe_recovery(ctx, rec, 120)
        assert back["t_first_commit"] is not None, back
        info = api.job(job)
        assert info.restarts == 1 and info.state == "RUNNING"
        # Slurm's first restart: attempt 100 (restarts * 100 + in-job restarts, rundir/contract.py).
        after = [r for r in read_steps(paths.steps(1)) if r.attempt == 100 and r.committed]
        assert after[0].healed_from == "peer:0", after[0]
        peer = {r.step: r.state_hash for r in read_steps(paths.steps(0)) if r.committed}
        wait_until(
            lambda: (
                after[0].step in peer
                or bool(peer.update({r.step: r.state_hash for r in read_steps(paths.steps(0)) if r.committed}))
            ),
            30,
            "the peer's record of the healed step",
        )
        assert after[0].state_hash == peer[after[0].step]
        report = write_report(sub, timeline=False)
        assert report["steps_lost"] == 0 and report["weights_identical"]
        print(
            f"\nkilled group 1's job ended {ended}; requeued; running again {back['t_running'] - rec['t']:.2f} s "
            f"after the kill, first commit {back['t_first_commit'] - back['t_running']:.2f} s after that"
        )
    finally:
        cli("cancel", "--run-dir", sub.run_dir, "heal")
    wait_until(lambda: not leftover_job_processes("heal"), 30, "the job's processes to exit")


def wait_until_state(api: SlurmActions, job_id: int, states: tuple[str, ...], timeout: float) -> str:
    seen = ""

    def done() -> bool:
        nonlocal seen
        seen = api.job(job_id).state
        return seen in states

    wait_until(done, timeout, f"job {job_id} to reach one of {states}")
    return seen
