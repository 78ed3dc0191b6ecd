"""submit / status / cancel / report of a Slurm job against FakeSlurm: fast, no cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lamplighter.configs.schema import JobConfig
from lamplighter.slurm.chaos_slurm import append_record
from lamplighter.slurm.fake import FakeSlurm
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.job_status import build_status, format_table, steps_per_s, tail_steps
from lamplighter.slurm.slurm_report import write_report
from lamplighter.slurm.submission import (
    SUBMISSION_FILE,
    SubmitError,
    cancel_job,
    find_run_dir,
    load,
    render_release_script,
    submit_job,
)
from lamplighter.supervisor.lighthouse_status import parse_status
from lamplighter.trainer.contract import RunPaths
from lamplighter.trainer.steplog import StepRecord, append_step

RECORDED = Path(__file__).parent.parent / "lighthouse_status" / "recorded"


def lab_job(tmp: Path, **over: object) -> JobConfig:
    data: dict[str, object] = {
        "name": "unit",
        "run_dir": str(tmp / "run"),
        "groups": {"count": 2},
        "lighthouse": {"port": 29599, "placement": "slurm-job"},
        "slurm": {"head_node": "n1"},
        "trainer": {"steps": 50},
    }
    data.update(over)
    return JobConfig.model_validate(data)


def ok_probe(_addr: str) -> object:
    return None


def test_submit_orders_lighthouse_groups_release_and_records(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path=str(tmp_path / "job.yaml"), probe=ok_probe, now=lambda: 7.0)
    assert sub.lighthouse_job_id == 1 and sub.groups == {0: 2, 1: 3} and sub.release_job_id == 4
    assert [api.job(j).name for j in sub.all_job_ids()] == [
        "ll-unit-g0",
        "ll-unit-g1",
        "ll-unit-release",
        "ll-unit-lighthouse",
    ]
    again = load(Path(sub.run_dir))
    assert again == sub and again.submitted_at == 7.0 and again.target_steps == 50
    assert find_run_dir("ignored", sub.run_dir) == Path(sub.run_dir)
    assert find_run_dir(sub.run_dir) == Path(sub.run_dir)
    release = Path(sub.scripts[-1]).read_text()
    assert "#SBATCH --dependency=afterany:2:3" in release and "exec scancel 1" in release
    assert "for j in 2 3; do" in release


def test_submit_refuses_a_job_already_running_and_cancel_stops_all(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    job = lab_job(tmp_path)
    sub = submit_job(job, api, config_path="x.yaml", probe=ok_probe)
    with pytest.raises(SubmitError, match="already submitted"):
        submit_job(job, api, config_path="x.yaml", probe=ok_probe)
    stopped = cancel_job(sub, api)
    assert [c.what for c in stopped] == ["group 0", "group 1", "release", "lighthouse"]
    assert all(api.job(j).state == "CANCELLED" for j in sub.all_job_ids())
    assert cancel_job(sub, api) == []
    # Everything ended: submitting again is allowed.
    submit_job(job, api, config_path="x.yaml", probe=ok_probe)


def test_submit_cancels_what_it_started_when_the_lighthouse_never_answers(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2"])

    def dead(addr: str) -> object:
        raise OSError(f"connection refused: {addr}")

    with pytest.raises(SubmitError, match="does not answer"):
        submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=dead, lighthouse_timeout=0.3)
    assert api.job(1).state == "CANCELLED"
    assert not (tmp_path / "run" / SUBMISSION_FILE).exists()


def test_head_service_placement_submits_only_groups(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3"])
    sub = submit_job(
        lab_job(tmp_path, lighthouse={"port": 29599, "placement": "head-service"}),
        api,
        config_path="x.yaml",
        probe=ok_probe,
    )
    assert sub.lighthouse_job_id is None and sub.release_job_id is None and sub.all_job_ids() == [1, 2]
    assert sub.lighthouse == "head-service"


def test_release_script_quotes_slurm_conf(tmp_path: Path) -> None:
    text = render_release_script(lab_job(tmp_path), [5, 6], 4, tmp_path, "/a b/slurm.conf")
    assert "export SLURM_CONF='/a b/slurm.conf'" in text


def rec(g: int, step: int, t: float, attempt: int = 0, h: str = "h") -> StepRecord:
    return StepRecord(
        t=t,
        replica_id=g,
        step=step,
        committed=True,
        participants=2,
        quorum_id=1,
        healed_from=None,
        loss=1.0,
        state_hash=f"{h}{step}",
        attempt=attempt,
        samples=4,
        first_sample=0,
    )


def test_status_table_and_json_from_slurm_steps_chaos_and_a_recorded_lighthouse_page(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe)
    api.drain("n4", "gpu 0: ecc uncorrectable")
    steps = {0: [rec(0, s, 100.0 + s) for s in range(1, 11)], 1: [rec(1, s, 100.0 + s) for s in range(1, 6)]}
    chaos = [{"event": "injected", "t": 103.0, "kind": "kill", "group": 1, "node": "n3", "job_id": 3}]
    quorum = parse_status((RECORDED / "status_two.html").read_text())
    jobs = {j: api.job(j) for j in sub.all_job_ids()}
    st = build_status(sub, jobs, api.nodes(), steps, chaos, quorum, None, now=111.0)
    assert st["step"] == 10 and st["steps_per_s"] == 1.0
    assert st["groups"]["1"]["last_fault"]["kind"] == "kill" and st["groups"]["0"]["last_fault"] is None
    assert st["groups"]["0"]["state"] == "RUNNING" and st["groups"]["0"]["restarts"] == 0
    assert st["nodes_out"] == [{"node": "n4", "state": api.node("n4").state, "reason": "gpu 0: ecc uncorrectable"}]
    assert st["quorum"]["quorum_id"] == quorum.quorum_id
    json.dumps(st)
    table = format_table(st)
    assert "chaos kill on n3" in table and "n4" in table and f"quorum {quorum.quorum_id}" in table
    st2 = build_status(sub, jobs, [], {}, [], None, "connection refused", now=111.0)
    assert "quorum: unavailable (connection refused)" in format_table(st2)


def test_tail_steps_skips_the_cut_line(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    for s in range(1, 200):
        append_step(p, rec(0, s, float(s)))
    tail = tail_steps(p, max_bytes=2000)
    assert tail and tail[-1].step == 199 and all(r.step > 150 for r in tail)
    assert steps_per_s(tail, now=199.0, window=10) == 1.0


def test_expand_hostlist() -> None:
    assert expand_hostlist("n2") == ["n2"]
    assert expand_hostlist("n[2-3,5],m1") == ["n2", "n3", "n5", "m1"]
    assert expand_hostlist("gpu[08-10]") == ["gpu08", "gpu09", "gpu10"]


def test_report_pairs_injections_with_daemon_actions_and_slurm_recovery(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, now=lambda: 90.0)
    paths = RunPaths(Path(sub.run_dir))
    for s in range(1, 21):
        append_step(paths.steps(0), rec(0, s, 100.0 + s))
    for s in [*range(1, 6), *range(12, 21)]:
        append_step(paths.steps(1), rec(1, s, 100.0 + s, attempt=0 if s < 6 else 1))
    chaos = Path(sub.run_dir) / "chaos.jsonl"
    append_record(
        chaos,
        {
            "event": "injected",
            "t": 105.5,
            "kind": "kill",
            "group": 1,
            "node": "n3",
            "job_id": 3,
            "restarts_before": 0,
            "detail": {},
        },
    )
    append_record(
        chaos,
        {
            "event": "recovered",
            "of_t": 105.5,
            "kind": "kill",
            "group": 1,
            "t_requeued": 107.0,
            "t_running": 108.0,
            "node_after": ["n4"],
            "t_first_commit": 112.0,
            "restarts_after": 1,
        },
    )
    actions = tmp_path / "n3.actions.jsonl"
    append_record(
        actions,
        {"ts": 106.0, "node": "n3", "action": "kill", "target": "job 3", "reason": "trainer exited", "observation": {}},
    )
    report = write_report(sub, action_logs=[actions], t_end=125.0, timeline=False)
    (f,) = report["faults"]
    assert f["detection_latency_s"] == 0.5 and "trainer exited" in f["detected_as"]
    assert f["running_again_s"] == 2.5 and f["node_after"] == "n4" and f["t_first_commit_after"] == 112.0
    assert report["steps_lost"] == 0 and report["weights_identical"] and report["reached_target"] is False
    assert json.loads((Path(sub.run_dir) / "report.json").read_text())["faults"][0]["node"] == "n3"


def test_chaos_schedule_hits_a_healthy_group_and_records_it(tmp_path: Path) -> None:
    from lamplighter.configs.schema import ChaosConfig
    from lamplighter.slurm.chaos_runner import healthy_groups, run_schedule
    from lamplighter.slurm.chaos_slurm import CHAOS_FILE, ChaosContext, read_records

    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe)
    paths = RunPaths(Path(sub.run_dir))
    ctx = ChaosContext(sub, api)
    assert healthy_groups(ctx) == []  # nobody committed yet
    for g in (0, 1):
        append_step(paths.steps(g), rec(g, 1, 100.0))
    assert healthy_groups(ctx) == [0, 1]
    cfg = ChaosConfig(enabled=True, schedule=[{"at_s": 0, "kind": "exception", "group": 1}])
    out = list(run_schedule(ctx, cfg, recovery_timeout=0.2, poll=0.01))
    assert [r["event"] for r in out] == ["injected", "recovered"]
    assert out[0]["group"] == 1 and out[0]["node"] == api.job(sub.groups[1]).node_list
    assert paths.inject_exception(1).exists() and not paths.inject_exception(0).exists()
    assert out[1]["t_first_commit"] is None  # nothing recovers in the fake
    assert len(read_records(Path(sub.run_dir) / CHAOS_FILE)) == 2
