"""submit / status / cancel / report of a Slurm job against FakeSlurm: fast, no cluster."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from lamplighter.commands.status import build_status, collect, format_table, steps_per_s, tail_steps
from lamplighter.configs.schema import JobConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.lab.run_report import write_report
from lamplighter.lighthouse.status import parse_status
from lamplighter.rundir import contract
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import StepRecord, append_step
from lamplighter.slurm.chaos.inject import append_record
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.parsers import JobInfo
from lamplighter.slurm.submit.submission import (
    SUBMISSION_FILE,
    SubmitError,
    cancel_job,
    find_run_dir,
    load,
    published_by,
    submit_job,
)

RECORDED = Path(__file__).parent.parent / "lighthouse_status" / "recorded"


def lab_job(tmp: Path, **over: object) -> JobConfig:
    data: dict[str, object] = {
        "name": "unit",
        "run_dir": str(tmp / "run"),
        "groups": {"count": 2},
        "lighthouse": {"port": 29599},
        "slurm": {"head_node": "n1"},
        "trainer": {"steps": 50},
    }
    data.update(over)
    return JobConfig.model_validate(data)


class Powers:
    """The test cluster's powers (chaos_slurm.ClusterPowers), recording what was asked and when."""

    def __init__(self, clock: Callable[[], object] = lambda: None) -> None:
        self.clock = clock
        self.done: list[tuple[object, str]] = []

    def crash_node(self, name: str) -> None:
        self.done.append((self.clock(), f"crash {name}"))

    def silence_node(self, name: str, silent: bool = True) -> int:
        self.done.append((self.clock(), f"{'silence' if silent else 'unsilence'} {name}"))
        return 4242

    def kill_controller(self) -> None:
        self.done.append((self.clock(), "kill slurmctld"))

    def start_controller(self) -> None:
        self.done.append((self.clock(), "start slurmctld"))


def ok_probe(_addr: str) -> object:
    return None


def published(_run_dir: Path, job_id: int) -> str:
    """What the fake Slurm's Lighthouse job 'published' (nothing runs under the fake)."""
    return f"http://n1:{29000 + job_id}"


def test_submit_orders_lighthouse_then_groups_and_records(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(
        lab_job(tmp_path),
        api,
        config_path=str(tmp_path / "job.yaml"),
        probe=ok_probe,
        read_address=published,
        now=lambda: 7.0,
    )
    assert sub.lighthouse_job_id == 1 and sub.groups == {0: 2, 1: 3}
    assert [api.job(j).name for j in sub.all_job_ids()] == ["ll-unit-g0", "ll-unit-g1", "ll-unit-lighthouse"]
    again = load(Path(sub.run_dir))
    assert again == sub and again.submitted_at == 7.0 and again.target_steps == 50
    assert find_run_dir("ignored", sub.run_dir) == Path(sub.run_dir)
    assert find_run_dir(sub.run_dir) == Path(sub.run_dir)


def test_submit_refuses_a_job_already_running_and_cancel_stops_all(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    job = lab_job(tmp_path)
    sub = submit_job(job, api, config_path="x.yaml", probe=ok_probe, read_address=published)
    with pytest.raises(SubmitError, match="already submitted"):
        submit_job(job, api, config_path="x.yaml", probe=ok_probe, read_address=published)
    res = cancel_job(sub, api)
    assert [c.what for c in res.cancelled] == ["group 0", "group 1", "lighthouse"] and not res.failed
    assert all(api.job(j).state == "CANCELLED" for j in sub.all_job_ids())
    again = cancel_job(sub, api)
    assert again.cancelled == [] and again.failed == []
    # Everything ended: submitting again is allowed, and the last run's end is not this one's.
    completed = contract.RunPaths(Path(sub.run_dir)).completed()
    completed.write_text("group 0\n")
    submit_job(job, api, config_path="x.yaml", probe=ok_probe, read_address=published)
    assert not completed.exists()


def test_submit_cancels_what_it_started_when_the_lighthouse_never_answers(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2"])

    def dead(addr: str) -> object:
        raise OSError(f"connection refused: {addr}")

    with pytest.raises(SubmitError, match="does not answer"):
        submit_job(
            lab_job(tmp_path),
            api,
            config_path="x.yaml",
            probe=dead,
            read_address=published,
            wait=True,
            lighthouse_timeout=0.3,
        )
    assert [api.job(j).state for j in (1, 2, 3)] == ["CANCELLED"] * 3
    assert not (tmp_path / "run" / SUBMISSION_FILE).exists()


def test_submit_waits_for_the_address_its_own_lighthouse_job_published(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3"])
    run = tmp_path / "run"
    # A previous run's record names another Slurm job: it must never be taken for this job's Lighthouse.
    RunPaths(run).lighthouse().parent.mkdir(parents=True)
    RunPaths(run).lighthouse().write_text(json.dumps({"address": "http://old:1", "slurm_job_id": "1"}))
    seen: list[str] = []
    with pytest.raises(SubmitError, match="waiting for its address"):
        submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=seen.append, wait=True, lighthouse_timeout=0.3)
    assert seen == [] and not RunPaths(run).lighthouse().exists()
    assert published_by(run, 5) is None
    RunPaths(run).lighthouse().write_text(json.dumps({"address": "http://n1:4242", "slurm_job_id": "5"}))
    assert published_by(run, 5) == "http://n1:4242" and published_by(run, 6) is None
    sub = submit_job(
        lab_job(tmp_path),
        api,
        config_path="x.yaml",
        probe=seen.append,
        read_address=lambda r, j: published(r, j),
        wait=True,
    )
    assert sub.lighthouse_address == "http://n1:29004" and seen == ["http://n1:29004"]


def test_the_lighthouse_job_never_takes_a_whole_node(tmp_path: Path) -> None:
    from lamplighter.slurm.submit.render import render_job

    job = lab_job(tmp_path, slurm={"head_node": "n1", "exclusive": True})
    lighthouse, group = (p.read_text() for p in render_job(job, tmp_path / "out")[:2])
    assert "#SBATCH --exclusive" not in lighthouse and "#SBATCH --exclusive" in group


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
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published)
    api.drain("n4", "gpu 0: ecc uncorrectable")
    steps = {0: [rec(0, s, 100.0 + s) for s in range(1, 11)], 1: [rec(1, s, 100.0 + s) for s in range(1, 6)]}
    chaos = [{"event": "injected", "t": 103.0, "kind": "kill", "group": 1, "node": "n3", "job_id": 3}]
    quorum = parse_status((RECORDED / "status_two.html").read_text())
    jobs = {j: api.job(j) for j in sub.all_job_ids()}
    st = build_status(sub, jobs, api.nodes(), steps, chaos, quorum, None, now=111.0)
    assert st["step"] == 10 and st["steps_per_s"] == 1.0
    assert st["groups"]["1"]["last_fault"]["kind"] == "kill" and st["groups"]["0"]["last_fault"] is None
    assert st["groups"]["0"]["state"] == "RUNNING" and st["groups"]["0"]["restarts"] == 0
    assert [(n["node"], n["state"], n["reason"], n["by_lamplighter"]) for n in st["nodes_out"]] == [
        ("n4", api.node("n4").state, "gpu 0: ecc uncorrectable", False)
    ]
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
    sub = submit_job(
        lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published, now=lambda: 90.0
    )
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
    from lamplighter.slurm.chaos.inject import CHAOS_FILE, ChaosContext, read_records
    from lamplighter.slurm.chaos.runner import healthy_groups, run_schedule

    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published)
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


def test_exact_chaos_fires_without_waiting_for_recovery_and_records_a_miss(tmp_path: Path) -> None:
    from lamplighter.configs.schema import ChaosConfig
    from lamplighter.slurm.chaos.inject import CHAOS_FILE, ChaosContext, read_records
    from lamplighter.slurm.chaos.runner import run_schedule

    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published)
    paths = RunPaths(Path(sub.run_dir))
    ctx = ChaosContext(sub, api)
    api.requeue(sub.groups[1])  # group 1 is between attempts: its job waits to start again
    # Nobody has committed (no healthy group): the gentle rule would wait forever, exact does not.
    cfg = ChaosConfig(
        enabled=True,
        schedule=[
            {"at_s": 0, "kind": "exception", "group": 0},
            {"at_s": 0, "kind": "hang-collective", "group": 0},
            {"at_s": 0, "kind": "exception", "group": 1},
        ],
    )
    out = list(run_schedule(ctx, cfg, recovery_timeout=0.2, poll=0.01))
    assert [(r["event"], r["kind"], r["group"]) for r in out[:3]] == [
        ("injected", "exception", 0),
        ("injected", "hang-collective", 0),  # before the first fault's recovery was seen
        ("missed", "exception", 1),
    ]
    assert out[2]["why"] == "group 1 has no process" and not paths.inject_exception(1).exists()
    assert paths.inject_exception(0).exists() and paths.inject_hang_collective(0).exists()
    assert sorted(r["event"] for r in out[3:]) == ["recovered", "recovered"]
    assert len(read_records(Path(sub.run_dir) / CHAOS_FILE)) == 5


def test_status_says_slurm_did_not_answer_instead_of_gone(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published)
    api.stop_controller()
    st = collect(sub, api, now=111.0, lighthouse_timeout=0.1)
    assert {g["state"] for g in st["groups"].values()} == {"UNKNOWN"} and st["lighthouse"]["state"] == "UNKNOWN"
    assert "Unable to contact slurm controller" in st["slurm_error"]
    table = format_table(st)
    assert "SLURM DID NOT ANSWER" in table and "GONE" not in table
    assert "nodes out of service: unknown" in table
    # A job Slurm forgot (MinJobAge) is GONE, and only then.
    jobs: dict[int, JobInfo | None] = {j: None for j in sub.all_job_ids()}
    gone = build_status(sub, jobs, [], {}, [], None, None, now=1.0)
    assert {g["state"] for g in gone["groups"].values()} == {"GONE"} and gone["slurm_error"] is None


def test_cancel_names_every_job_it_could_not_cancel(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published)
    api.stop_controller()
    res = cancel_job(sub, api)
    assert res.cancelled == [] and [f.what for f in res.failed] == ["group 0", "group 1", "lighthouse"]
    assert all("Unable to contact" in f.error for f in res.failed)
    api.start_controller()
    assert len(cancel_job(sub, api).cancelled) == 3


def test_submit_with_slurm_gone_part_way_records_what_it_could_not_roll_back(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3"])

    def lighthouse_queued_then_slurm_stops(line: str) -> None:
        if line == "Lighthouse job 1 submitted":
            api.stop_controller()

    job = lab_job(tmp_path)
    with pytest.raises(SubmitError, match=r"COULD NOT CANCEL Slurm jobs \[1\].*lamplighter cancel unit"):
        submit_job(
            job,
            api,
            config_path="x.yaml",
            say=lighthouse_queued_then_slurm_stops,
            rollback_timeout=0.2,
        )
    sub = load(tmp_path / "run")
    assert sub.lighthouse_job_id == 1 and sub.groups == {} and "could not cancel" in sub.extra["incomplete"]
    assert "SUBMISSION INCOMPLETE" in format_table(build_status(sub, {}, [], {}, [], None, None, 1.0))
    api.start_controller()
    assert [c.job_id for c in cancel_job(sub, api).cancelled] == [1]


def test_submit_rollback_rides_out_a_short_outage(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3"])

    def slurm_blips(line: str) -> None:
        if line == "Lighthouse job 1 submitted":
            api.stop_controller(for_calls=3)  # the first group's sbatch and two rollback attempts fail

    with pytest.raises(SubmitError, match=r"cancelled \[1\]"):
        submit_job(
            lab_job(tmp_path),
            api,
            config_path="x.yaml",
            say=slurm_blips,
            rollback_timeout=10.0,
        )
    assert api.job(1).state == "CANCELLED" and not api.jobs()
    assert not (tmp_path / "run" / SUBMISSION_FILE).exists()


def test_a_daemon_action_concerns_a_fault_by_exact_job_id_or_node() -> None:
    from lamplighter.lab.run_report import concerns

    recorded = (Path(__file__).parent.parent / "daemon" / "recorded" / "actions_demo.jsonl").read_text().splitlines()
    requeue = json.loads(recorded[1])  # job 812 requeued by n2; its observation says "attempt": 0
    assert concerns(requeue, {"job_id": 812, "node": None})
    # Regression: matched as text, job 1 matched every action that said "attempt": 1 (or job 81, 12, ...).
    assert not concerns({**requeue, "observation": {**requeue["observation"], "attempt": 1}}, {"job_id": 1})
    assert not concerns(requeue, {"job_id": 81}) and not concerns(requeue, {"job_id": 12})
    assert concerns(requeue, {"job_id": 5, "node": "n2"})  # acted on the crashed node
    drain = json.loads(recorded[3])
    assert drain["action"] == "drain" and concerns(drain, {"job_id": 990}) and not concerns(drain, {"job_id": 99})


def test_injection_time_is_stamped_right_before_the_fault(tmp_path: Path) -> None:
    """Regression: stamped after the signal, the time left out how long the injection took."""
    from lamplighter.slurm.chaos.inject import ChaosContext, inject

    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published)
    ticks = iter(range(100))
    cluster = Powers(lambda: next(ticks))
    ctx = ChaosContext(sub, api, cluster=cluster, now=lambda: next(ticks))
    rec = inject(ctx, "node-crash", 0)
    assert rec["t"] == cluster.done[0][0] - 1  # the clock was read once, just before the crash


def test_a_partition_heals_itself_and_the_controller_comes_back(tmp_path: Path) -> None:
    """partition and slurmctld-restart end by themselves, journalled as "restored", in that order per fault."""
    from lamplighter.slurm.chaos.inject import CHAOS_FILE, ChaosContext, inject, read_records

    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published)
    cluster = Powers()
    ctx = ChaosContext(sub, api, cluster=cluster, partition_s=0.0, controller_down_s=0.0)
    cut = inject(ctx, "partition", 1)
    ctx.wait_restores()
    inject(ctx, "slurmctld-restart", None)
    ctx.wait_restores()
    node = expand_hostlist(api.job(sub.groups[1]).node_list or "")[0]
    assert [what for _, what in cluster.done] == [
        f"silence {node}",
        f"unsilence {node}",
        "kill slurmctld",
        "start slurmctld",
    ]
    assert cut["node"] == node and cut["detail"]["slurmd_pid"] == 4242
    restored = [r for r in read_records(Path(sub.run_dir) / CHAOS_FILE) if r["event"] == "restored"]
    assert [(r["kind"], r["ok"]) for r in restored] == [("partition", True), ("slurmctld-restart", True)]


def test_faults_of_the_test_cluster_are_refused_without_one(tmp_path: Path) -> None:
    from lamplighter.slurm.chaos.inject import ChaosContext, ChaosError, inject

    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published)
    ctx = ChaosContext(sub, api)
    for kind, group in (("partition", 0), ("slurmctld-restart", None), ("node-crash", 0)):
        with pytest.raises(ChaosError, match="test cluster only"):
            inject(ctx, kind, group)


def test_kill_healer_kills_the_group_then_the_peer_that_announces_a_send(tmp_path: Path) -> None:
    """Real processes stand in for two groups' trainers (found in /proc by their environment, as trainers are)."""
    import os
    import subprocess

    from lamplighter.configs.schema import ChaosConfig, ChaosEvent
    from lamplighter.slurm.chaos.healer import drain
    from lamplighter.slurm.chaos.inject import ChaosContext
    from lamplighter.slurm.chaos.runner import run_schedule

    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published)
    procs = {
        g: subprocess.Popen(
            ["sleep", "120"],
            env={**os.environ, "LAMPLIGHTER_JOB": sub.job, "LAMPLIGHTER_REPLICA_ID": str(g), "RANK": "0"},
        )
        for g in (0, 1)
    }
    try:
        ctx = ChaosContext(sub, api)
        chaos = ChaosConfig(enabled=True, schedule=[ChaosEvent(at_s=0, kind="kill-healer", group=1)], mode="exact")
        out = run_schedule(ctx, chaos, recovery_timeout=0.0, poll=0.01)
        armed = next(out)
        assert (armed["event"], armed["kind"], armed["group"], armed["detail"]["arms"]) == (
            "injected",
            "kill",
            1,
            "kill-healer",
        )
        assert procs[1].wait(10) == -9 and procs[0].poll() is None
        assert drain(ctx.fired) == []  # nobody sends yet: group 0 lives on
        # Group 0 starts sending its state to group 1's new attempt, as torchft's state_dict callback announces.
        contract.write_json_atomic(RunPaths(Path(sub.run_dir)).heal_sending(0), {"t": ctx.now(), "attempt": 0})
        records = [r for r in out if r["event"] == "injected"]
        assert procs[0].wait(10) == -9
        assert [(r["kind"], r["group"], r["detail"]["healing_group"]) for r in records] == [("kill-healer", 0, 1)]
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_chaos_stops_with_the_job_and_its_open_watches_end_saying_so(tmp_path: Path) -> None:
    """Regression (make soak at 24f4ff1): faults were still drawn after the job had ended, and every fault
    struck near its end waited out its whole recovery watch (180 s) for a recovery that could not come."""
    from lamplighter.configs.schema import ChaosConfig
    from lamplighter.slurm.chaos.inject import ChaosContext
    from lamplighter.slurm.chaos.runner import run_schedule
    from lamplighter.slurm.submit.job_end import JobEnd

    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published)
    ctx = ChaosContext(sub, api)
    # A random draw with no max: it has no end of its own.
    chaos = ChaosConfig(enabled=True, mtbf_s=0.01, seed=1, kinds=["exception"], start_after_s=0, mode="exact")
    end = JobEnd(sub, api, grace_s=0.0, every_s=0.0)
    out = run_schedule(ctx, chaos, recovery_timeout=3600.0, poll=0.01, job_end=end)
    struck = next(out)
    assert struck["event"] == "injected"
    for jid in sub.groups.values():
        api.finish(jid)  # the job reaches its target
    rest = list(out)
    assert [r["event"] for r in rest] == ["recovered"] and rest[0]["of_t"] == struck["t"]
    assert "every group job ended" in rest[0]["job_ended"] and rest[0]["t_first_commit"] is None
    assert end.over


def test_chaos_draws_until_its_strikes_a_miss_not_counting_then_only_watches(tmp_path: Path) -> None:
    from lamplighter.configs.schema import ChaosConfig
    from lamplighter.slurm.chaos.inject import ChaosContext
    from lamplighter.slurm.chaos.runner import run_schedule

    now = [0.0]
    api = FakeSlurm(["n1", "n2", "n3", "n4"], clock=lambda: now[0])
    sub = submit_job(lab_job(tmp_path), api, config_path="x.yaml", probe=ok_probe, read_address=published)
    for jid in sub.groups.values():
        api.requeue(jid)  # every group between attempts: exact faults hit nothing
    ctx = ChaosContext(sub, api)
    chaos = ChaosConfig(enabled=True, mtbf_s=0.01, seed=1, kinds=["exception"], start_after_s=0, mode="exact")
    seen: list[dict[str, object]] = []
    for rec in run_schedule(ctx, chaos, recovery_timeout=0.0, poll=0.001, strikes=2):
        seen.append(rec)
        if [r["event"] for r in seen].count("missed") == 2:
            now[0] += 60.0  # the groups run again
    events = [r["event"] for r in seen]
    assert events.count("missed") == 2 and events.count("injected") == 2, events
    last_strike = max(i for i, e in enumerate(events) if e == "injected")
    assert set(events[last_strike + 1 :]) == {"recovered"}, events  # nothing drawn after the second strike
