"""The head's job table: published once for every node daemon, which then asks slurmctld only about what
it lacks or shows changed; a table never fences or refuses on its own word."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fake_node import PID0, FakeNode

from lamplighter.configs.schema import JobConfig, NodeConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.rundir.actions import ActionLog
from lamplighter.slurm.parsers import job_from_fields, parse_show_config, parse_squeue_jobs
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.head.loop import HeadLoop
from lamplighter.supervisor.health_report import read_reports
from lamplighter.supervisor.job_table import TABLE_FILE, JobTable, publish, record, table_doc
from lamplighter.supervisor.state_store import DaemonState


class Now:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def submit_named(slurm: FakeSlurm, folder: Path, name: str) -> int:
    """A job of that Slurm name, submitted from a script of its own in `folder`."""
    script = folder / f"{name}.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --job-name={name}\n")
    return slurm.submit(script)


def written(slurm: FakeSlurm, now: float, head: str = "n1") -> dict[str, object]:
    return table_doc(now, head, {j.job_id: j for j in slurm.all_jobs("")})


def test_a_fresh_table_answers_what_it_holds_and_says_what_it_lacks(tmp_path: Path) -> None:
    slurm = FakeSlurm(["n1", "n2"])
    script = tmp_path / "g0.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=ll-llama-g0\n")
    job = slurm.submit(script)
    publish(tmp_path, written(slurm, 1000.0))
    table = JobTable(tmp_path, max_age_s=15.0, owner=os.getuid(), clock=Now(1010.0))
    got = table.lookup([job, 999])
    assert got is not None
    found, lacking = got
    assert found[job].name == "ll-llama-g0" and found[job].running and found[job].node_list == slurm.job(job).node_list
    assert lacking == {999}
    assert read_reports(tmp_path, 1010.0) == {}  # no node report reader takes the table for a node


@pytest.mark.parametrize(
    ("age", "owner_shift", "text"),
    [(16.0, 0, None), (-20.0, 0, None), (1.0, 1, None), (1.0, 0, "{not json"), (1.0, 0, '{"written_at": 1}')],
)
def test_no_table_is_taken_that_is_old_from_the_future_someone_elses_or_broken(
    tmp_path: Path, age: float, owner_shift: int, text: str | None
) -> None:
    doc = table_doc(1000.0, "n1", {})
    if text is None:
        publish(tmp_path, doc)
    else:
        (tmp_path / TABLE_FILE).write_text(text)
    table = JobTable(tmp_path, max_age_s=15.0, owner=os.getuid() + owner_shift, clock=Now(1000.0 + age))
    assert table.lookup([1]) is None
    assert table.refused is not None and str(tmp_path / TABLE_FILE) in table.refused  # said, with its file
    if owner_shift:
        assert f"belongs to uid {os.getuid()}" in table.refused


def test_no_table_at_all_is_no_refusal_and_a_taken_one_clears_it(tmp_path: Path) -> None:
    table = JobTable(tmp_path, max_age_s=15.0, owner=os.getuid(), clock=Now(1000.0))
    assert table.lookup([1]) is None and table.refused is None  # no head publishing: Slurm is asked, as documented
    (tmp_path / TABLE_FILE).write_text("{not json")
    assert table.lookup([1]) is None and table.refused is not None
    publish(tmp_path, table_doc(1000.0, "n1", {}))
    assert table.lookup([1]) is not None and table.refused is None


def test_a_table_on_a_root_squash_export_is_refused_in_a_metric_and_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """root_squash maps the head's root to nobody: the table is there, owned by 65534, and every node would
    poll slurmctld in silence."""
    (tmp_path / "status").mkdir()
    n = FakeNode(tmp_path, cluster_status_dir=str(tmp_path / "status"))
    metrics = n.metrics
    try:
        n.loop.job_table.clock = n.clock  # type: ignore[union-attr]
        run_dir, config = n.job_dir(JobConfig(name="llama", health={"progress": "off"}))
        job = n.submit("llama", 1)
        status = tmp_path / "status"
        publish(status, written(n.slurm, n.clock.t))
        os.chown(status / TABLE_FILE, 65534, 65534)  # as the export writes it
        n.task(PID0 + 100, job, "llama", 1, run_dir=run_dir, config=config)

        def republish() -> None:
            publish(status, written(n.slurm, n.clock.t))
            os.chown(status / TABLE_FILE, 65534, 65534)

        with caplog.at_level(logging.WARNING, logger="lamplighter.supervisor.node.loop"):
            n.run(30, each=republish)
        assert n.loop.slurm_asked > 0  # polled slurmctld itself...
        assert metrics.registry.get_sample_value("lamplighter_job_table_refused") == 1.0  # ...and said so
        said = [r.getMessage() for r in caplog.records if "job table is refused" in r.getMessage()]
        assert len(said) == 1 and "belongs to uid 65534, not to uid 0" in said[0], said
    finally:
        n.close()
        n.remove()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[FakeNode]:
    (tmp_path / "status").mkdir()
    n = FakeNode(tmp_path, cluster_status_dir=str(tmp_path / "status"))
    n.loop.job_table.owner = os.getuid()  # type: ignore[union-attr]
    n.loop.job_table.clock = n.clock  # type: ignore[union-attr]
    try:
        yield n
    finally:
        n.close()
        n.remove()


def test_a_node_daemon_checks_its_trainers_against_the_table_and_asks_slurm_only_on_a_change(node: FakeNode) -> None:
    run_dir, config = node.job_dir(JobConfig(name="llama", health={"progress": "off"}))
    job = node.submit("llama", 1)
    status = Path(node.node_cfg["cluster_status_dir"])
    publish(status, written(node.slurm, node.clock.t))
    node.task(PID0 + 100, job, "llama", 1, run_dir=run_dir, config=config)
    assert node.run(30, each=lambda: publish(status, written(node.slurm, node.clock.t))) == []
    assert node.loop.trainers and node.loop.slurm_asked == 0  # 30 cycles, 6 slow ones: slurmctld never asked
    # Slurm moves the job on (a requeue) and the table shows it: the daemon asks Slurm before it believes it.
    node.slurm.requeue(job)
    publish(status, written(node.slurm, node.clock.t))
    asked = node.loop.slurm_asked
    results = node.run(10)
    assert node.loop.slurm_asked > asked
    assert [r["action"] for r in results] == ["kill_local"]  # fenced as before: its run is over
    assert "is PENDING while this process runs" in json.loads(node.lines[-1])["reason"]


def test_a_table_that_still_shows_the_old_run_is_asked_again_before_a_new_trainer_is_refused(node: FakeNode) -> None:
    run_dir, config = node.job_dir(JobConfig(name="llama", health={"progress": "off"}))
    job = node.submit("llama", 1)
    status = Path(node.node_cfg["cluster_status_dir"])
    node.slurm.requeue(job)  # the table is written while the job waits to start again
    publish(status, written(node.slurm, node.clock.t))
    node.slurm.start_now(job)
    node.task(PID0 + 100, job, "llama", 1, run_dir=run_dir, config=config)  # its new run's task, here
    assert node.run(3) == []
    assert node.loop.trainers and node.loop.slurm_asked > 0  # adopted on Slurm's own answer


def test_the_head_reads_slurm_with_two_calls_per_poll_and_publishes_the_table(tmp_path: Path) -> None:
    clock = Now(1000.0)
    slurm = FakeSlurm(["n1", "n2"], clock=clock)
    job = submit_named(slurm, tmp_path, "ll-llama-g0")
    calls: list[str] = []
    for name in ("all_jobs", "nodes", "jobs", "jobs_by_id", "job", "node"):
        real = getattr(slurm, name)
        setattr(slurm, name, lambda *a, _r=real, _n=name, **k: calls.append(_n) or _r(*a, **k))
    cfg = NodeConfig.model_validate(
        {"role": "head", "state_dir": str(tmp_path / "state"), "cluster_status_dir": str(tmp_path), "slurm_poll_s": 5}
    )
    executor = Executor(DaemonState.load(tmp_path / "head"), slurm, None, ActionLog("head", lambda line: None))
    head = HeadLoop(cfg, slurm, executor, clock, tmp_path / "logs")
    head.probe = lambda addrs, timeout: set(addrs)  # every slurmd answers: no node is silent
    for _ in range(10):
        head.cycle()
        clock.t += 1.0
    assert calls == ["all_jobs", "nodes"] * 2  # two calls at 1000 and at 1005: not every second, nothing else
    table = JobTable(tmp_path, max_age_s=15.0, owner=os.getuid(), clock=clock).lookup([job])
    assert table is not None and table[0][job].name == "ll-llama-g0"


def test_a_record_reads_back_as_the_job_squeue_gave() -> None:
    text = (Path(__file__).parents[1] / "slurm" / "recorded" / "squeue_jobs_by_id.txt").read_text()
    ids = [int(line.split("\x1f")[0]) for line in text.splitlines() if line.strip()]
    for j, info in parse_squeue_jobs(text, ids).items():
        back = job_from_fields(record(info, f"ll-x-g{j}"))
        assert back == replace(info, name=f"ll-x-g{j}") and back.user_id == info.user_id
        assert back.start_epoch == info.start_epoch


def test_a_job_slurm_does_not_know_holds_up_no_other_and_is_not_asked_every_cycle(node: FakeNode) -> None:
    """Seen in CI: another test cluster's job on this machine (same node names) was in every cycle's query;
    a query of only jobs Slurm does not know fails, and a fresh spare step of ours was never adopted."""
    run_dir, config = node.job_dir(JobConfig(name="llama", health={"progress": "off"}))
    job = node.submit("llama", 1)
    status = Path(node.node_cfg["cluster_status_dir"])
    publish(status, written(node.slurm, node.clock.t))
    asked: list[object] = []
    real = node.slurm.job
    node.slurm.job = lambda j: asked.append(j) or real(j)  # type: ignore[method-assign]
    node.task(PID0 + 300, 987654, "other", 0)  # a process of a job this Slurm never had
    node.task(PID0 + 100, job, "llama", 1, run_dir=run_dir, config=config)
    assert node.run(20, each=lambda: publish(status, written(node.slurm, node.clock.t))) == []
    assert [t.job_id for t in node.loop.trainers.values()] == [str(job)]
    assert asked.count(987654) == 1  # 40 cycles: asked once, not again within UNKNOWN_JOB_S


def test_the_table_finds_jobs_by_name_only_while_fresh(tmp_path: Path) -> None:
    clock = Now(1000.0)
    slurm = FakeSlurm(["n1", "n2"], clock=clock)
    job = submit_named(slurm, tmp_path, "ll-llama-lighthouse")
    publish(tmp_path, written(slurm, clock.t))
    table = JobTable(tmp_path, max_age_s=15.0, owner=os.getuid(), clock=clock)
    [found] = table.named("ll-llama-lighthouse") or []
    assert found.job_id == job and found.state == "RUNNING" and found.node_list
    assert table.named("ll-other-lighthouse") == []
    clock.t += 16
    assert table.named("ll-llama-lighthouse") is None  # too old: Slurm is asked instead


def test_a_table_on_a_root_squash_export_is_taken_when_node_yaml_names_the_owner_it_writes_as(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """deploy/README.md: on a root_squash export the daemons write as nobody; `cluster_status_owner: nobody`
    makes the nodes take the head's table (and ring) of that owner, as the docs say, and nothing else."""
    (tmp_path / "status").mkdir()
    n = FakeNode(tmp_path, cluster_status_dir=str(tmp_path / "status"), cluster_status_owner="nobody")
    try:
        assert n.loop.job_table is not None and n.loop.job_table.owner == 65534
        assert n.loop.neighbours is not None and n.loop.neighbours.owner == 65534
        n.loop.job_table.clock = n.clock
        run_dir, config = n.job_dir(JobConfig(name="llama", health={"progress": "off"}))
        job = n.submit("llama", 1)
        status = tmp_path / "status"

        def republish() -> None:
            publish(status, written(n.slurm, n.clock.t))
            os.chown(status / TABLE_FILE, 65534, 65534)

        republish()
        n.task(PID0 + 100, job, "llama", 1, run_dir=run_dir, config=config)
        with caplog.at_level(logging.WARNING, logger="lamplighter.supervisor.node.loop"):
            n.run(30, each=republish)
        assert n.loop.trainers  # adopted, on the table's word
        assert n.metrics.registry.get_sample_value("lamplighter_job_table_refused") == 0.0
        assert not [r for r in caplog.records if "job table is refused" in r.getMessage()]
        os.chown(status / TABLE_FILE, 0, 0)  # root's is now someone else's
        assert n.loop.job_table.lookup([job]) is None and "not to uid 65534" in str(n.loop.job_table.refused)
    finally:
        n.close()
        n.remove()


def test_an_owner_this_machine_lacks_is_an_error_naming_it() -> None:
    from lamplighter.system.users import uid_of

    assert uid_of("root") == 0 and uid_of("65534") == 65534
    with pytest.raises(ValueError, match="no user 'lamplighter-none' on this machine"):
        uid_of("lamplighter-none")


def test_the_table_is_private_under_slurms_private_data_jobs(tmp_path: Path) -> None:
    from lamplighter.supervisor.job_table import FILE_MODE, PRIVATE_MODE, table_mode

    rec = (Path(__file__).parents[1] / "slurm" / "recorded" / "scontrol_show_config.txt").read_text()
    conf = parse_show_config(rec)
    assert conf["PrivateData"] == "none" and table_mode(conf) == FILE_MODE == 0o644
    assert table_mode({**conf, "PrivateData": "accounts,jobs,usage"}) == PRIVATE_MODE == 0o600
    clock = Now(1000.0)
    slurm = FakeSlurm(["n1"], clock=clock)
    cfg = NodeConfig.model_validate(
        {"role": "head", "state_dir": str(tmp_path / "s"), "cluster_status_dir": str(tmp_path)}
    )
    executor = Executor(DaemonState.load(tmp_path / "head"), slurm, None, ActionLog("head", lambda line: None))
    head = HeadLoop(cfg, slurm, executor, clock, tmp_path / "logs", table_mode=PRIVATE_MODE)
    head.probe = lambda addrs, timeout: set(addrs)
    head.cycle()
    assert (tmp_path / TABLE_FILE).stat().st_mode & 0o777 == 0o600


def test_a_proctrack_other_than_cgroup_is_said_at_start() -> None:
    """deploy/README.md: the daemon logs an error at start, and its gauge says 0, when Slurm does not track
    processes with cgroups (it then adopts no trainer)."""
    from lamplighter.commands.supervise import check_proctrack
    from lamplighter.slurm.run import SlurmError

    rec = (Path(__file__).parents[1] / "slurm" / "recorded" / "scontrol_show_config.txt").read_text()
    conf = parse_show_config(rec)
    assert check_proctrack(conf) is None
    why = check_proctrack({**conf, "ProctrackType": "proctrack/linuxproc"})
    assert why is not None and "proctrack/linuxproc, not proctrack/cgroup" in why and "adopts no trainer" in why
    assert "cannot read Slurm's configuration" in str(
        check_proctrack(SlurmError(["scontrol", "show", "config"], None, "", timed_out=True))
    )
