"""The everyday verbs (issue #41 item 5): logs, list, revive, and status --watch's cost, against FakeSlurm and
recorded squeue output; no cluster, no sleeps (waiting is a callback the test drives)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lamplighter.commands import job as job_cli
from lamplighter.commands import jobs as job_list
from lamplighter.commands import logs as job_logs
from lamplighter.commands.cli import build_parser, main
from lamplighter.commands.revive import Plan, Refused, Seen, decide, revive
from lamplighter.commands.status import collect, format_table, read_jobs
from lamplighter.configs.schema import JobConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.rundir.actions import ACTIONS_FILE, format_action
from lamplighter.rundir.contract import RunPaths
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.head_table import JobTable
from lamplighter.slurm.submit.job_index import remember
from lamplighter.slurm.submit.release import decide as release_decide
from lamplighter.slurm.submit.submission import Submission, load, save, submit_job
from lamplighter.supervisor.job_table import publish, table_doc

RECORDED = Path(__file__).parent.parent / "slurm" / "recorded"
USER = 1000 if os.geteuid() == 0 else os.geteuid()  # revive refuses root: the job's owner, as a test makes one


class UserSlurm(FakeSlurm):
    """FakeSlurm whose jobs are submitted by USER (as `sbatch` run by that user would)."""

    def submit(self, script: Path, after: int | None = None, user_id: int = USER) -> int:
        return super().submit(script, after, user_id)


class Counting:
    """A SlurmApi that records each call it passes on: the cost of a command to slurmctld."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*a: Any, **kw: Any) -> Any:
            self.calls.append(name)
            return attr(*a, **kw)

        return call


def lab_job(tmp: Path, name: str = "unit", groups: int = 2, head: str = "n1") -> JobConfig:
    return JobConfig.model_validate(
        {
            "name": name,
            "run_dir": str(tmp / name),
            "groups": {"count": groups},
            "lighthouse": {"port": 29599},
            "slurm": {"head_node": head},
            "trainer": {"steps": 50},
        }
    )


def submitted(
    tmp: Path, api: Any, name: str = "unit", groups: int = 2, at: float = 7.0, head: str = "n1"
) -> Submission:
    return submit_job(
        lab_job(tmp, name, groups, head),
        api,
        config_path=str(tmp / f"{name}.yaml"),
        probe=lambda _a: None,
        read_address=lambda _r, j: f"http://n1:{29000 + j}",
        now=lambda: at,
    )


def own(path: Path) -> None:
    """The run dir as its user's: what revive insists on (a test running as root makes it USER's)."""
    if os.geteuid() != 0:
        return
    for d, dirs, files in os.walk(path):
        for n in [d, *(os.path.join(d, x) for x in dirs + files)]:
            os.chown(n, USER, USER)


def give_up_line(job_id: int, group: str, attempt: int, t: float = 50.0) -> str:
    """What a node daemon appends when it gives a group up (executor: jobs = [{job_id, group, attempt}])."""
    return format_action(
        t,
        "n2",
        "give_up",
        str(job_id),
        f"GIVING UP on Slurm job {job_id}: restart budget exhausted after 10 restarts (restart.budget_per_group 10)",
        {"type": "exit", "job_id": str(job_id), "attempt": attempt, "code": 1},
        jobs=[{"job_id": str(job_id), "group": group, "attempt": attempt}],
        outcome="logged",
    )


def args_of(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


# -- logs --------------------------------------------------------------------------------------------------------


def log_run(tmp: Path) -> tuple[Path, Submission]:
    """A run dir with group 0's first job (2) and its revived one (7), group 1 (3) and the Lighthouse (1)."""
    run = tmp / "run"
    logs = RunPaths(run).logs()
    logs.mkdir(parents=True)
    (logs / "g0-2.out").write_text("old attempt\n")
    (logs / "g0-7.out").write_text("g0 line 1\ng0 line 2\n")
    (logs / "g1-3.out").write_text("".join(f"g1 line {i}\n" for i in range(1, 6)))
    (logs / "lighthouse-1.out").write_text("lighthouse up\n")
    (logs / "notes.txt").write_text("not Slurm's\n")
    sub = Submission("unit", "x.yaml", str(run), None, "", 1, {0: 7, 1: 3}, [], 1.0)
    save(sub)
    return run, sub


def test_logs_shows_the_newest_log_of_each_group_and_the_lighthouse_with_headers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, _ = log_run(tmp_path)
    assert main(["logs", str(run)]) == 0
    out = capsys.readouterr().out
    logs = RunPaths(run).logs()
    assert f"==> {logs / 'g0-7.out'} (group 0, Slurm job 7) <==\ng0 line 1\ng0 line 2\n" in out
    assert "old attempt" not in out and "not Slurm's" not in out
    order = [out.index(f"{logs / n}") for n in ("g0-7.out", "g1-3.out", "lighthouse-1.out")]
    assert order == sorted(order)
    assert main(["logs", str(run), "--group", "1", "--tail", "2"]) == 0
    out = capsys.readouterr().out
    assert out == f"==> {logs / 'g1-3.out'} (group 1, Slurm job 3) <==\ng1 line 4\ng1 line 5\n"
    assert main(["logs", str(run), "--lighthouse"]) == 0
    assert capsys.readouterr().out == f"==> {logs / 'lighthouse-1.out'} (lighthouse, Slurm job 1) <==\nlighthouse up\n"


def test_logs_refuses_a_group_the_job_has_not_and_says_which_logs_are_not_there_yet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, _ = log_run(tmp_path)
    assert main(["logs", str(run), "--group", "5"]) == 2
    err = capsys.readouterr().err
    assert err == "lamplighter logs: error: job unit has no group 5 (its groups: 0, 1)\n"
    assert main(["logs", str(run), "--tail", "-1"]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    (RunPaths(run).logs() / "g1-3.out").unlink()
    assert main(["logs", str(run), "--group", "1"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and f"group 1: no log yet (Slurm job 3 writes {RunPaths(run).logs()}/g1-3.out" in err


def test_tail_start_counts_lines_from_the_end_across_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_logs, "TAIL_BLOCK", 7)  # lines straddle the blocks
    p = tmp_path / "f"
    p.write_bytes(b"one\ntwo two\nthree\nfour")
    data = p.read_bytes()
    assert data[job_logs.tail_start(p, 1) :] == b"four"
    assert data[job_logs.tail_start(p, 3) :] == b"two two\nthree\nfour"
    assert job_logs.tail_start(p, 9) == 0
    p.write_bytes(b"one\ntwo\n")
    assert p.read_bytes()[job_logs.tail_start(p, 1) :] == b"two\n"


def test_the_lighthouse_release_line_is_what_logs_f_ends_on() -> None:
    d = release_decide(100.0, {2: "COMPLETED", 3: "FAILED"}, 0.0, 15.0)
    assert d.release and f"lamplighter release: {d.reason}".startswith(job_logs.JOB_OVER_LINE)


def test_logs_follow_prints_whole_lines_takes_up_a_revived_groups_new_file_and_ends_with_the_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, sub = log_run(tmp_path)
    logs = RunPaths(run).logs()
    steps: list[Callable[[], None]] = [
        lambda: _append(logs / "g1-3.out", "g1 line 6\nhalf a li"),
        lambda: _append(logs / "g1-3.out", "ne\n"),
        lambda: _revive_in_record(run, sub, logs),
        lambda: _append(logs / "lighthouse-1.out", "lamplighter release: every group job ended (3 FAILED) 15 s ago\n"),
    ]
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        if steps:
            steps.pop(0)()

    assert job_logs.run_logs(args_of("logs", str(run), "--group", "1", "-f", "--tail", "1"), sleep=sleep) == 0
    out, err = capsys.readouterr()
    head = f"==> {logs / 'g1-3.out'} (group 1, Slurm job 3) <==\n"
    new_head = f"==> {logs / 'g1-9.out'} (group 1, Slurm job 9) <==\n"
    assert out == f"{head}g1 line 5\ng1 line 6\nhalf a line\n\n{new_head}revived g1\n", out
    assert "the job is over: every group job ended" in err
    assert not steps and set(waits) == {job_logs.FOLLOW_S}


def test_logs_follow_stops_on_ctrl_c(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = log_run(tmp_path)

    def interrupt(_s: float) -> None:
        raise KeyboardInterrupt

    assert job_logs.run_logs(args_of("logs", str(run), "--lighthouse", "-f"), sleep=interrupt) == 0
    assert "lighthouse up" in capsys.readouterr().out


def _append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def _revive_in_record(run: Path, sub: Submission, logs: Path) -> None:
    sub.groups[1] = 9
    save(sub)
    (logs / "g1-9.out").write_text("revived g1\n")


# -- list --------------------------------------------------------------------------------------------------------


@pytest.fixture
def user_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An unprivileged user's index (root keeps none): geteuid answers USER, the index under tmp_path."""
    monkeypatch.setattr(os, "geteuid", lambda: USER)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "lamplighter" / "jobs.json"


def test_list_shows_the_users_jobs_newest_first_with_states_from_one_squeue(
    tmp_path: Path, user_index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeSlurm(["n1", "n2", "n3", "n4", "n5", "n6"])
    api = Counting(fake)
    old = submitted(tmp_path, fake, "old", groups=2, at=100.0)
    new = submitted(tmp_path, fake, "new", groups=1, at=200.0, head="n4")
    fake.finish(old.groups[1], exit_code=1)
    for s in (old, new):
        remember(s.job, s.run_dir, now=s.submitted_at)
    remember("moved", str(tmp_path / "nowhere"), now=150.0)
    confs: list[str | None] = []

    def api_for(conf: str | None) -> Any:
        confs.append(conf)
        return api

    assert job_list.run_list(args_of("list"), api_for=api_for) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "SUBMITTED", "RUN", "DIR"]
    assert [line.split()[0] for line in lines[1:]] == ["new", "moved", "old"]
    assert "1 RUNNING" in lines[1] and new.run_dir in lines[1]
    assert "run dir missing" in lines[2]
    assert "1 FAILED, 1 RUNNING" in lines[3]
    assert api.calls == ["jobs_by_id"] and confs == [None]  # ONE squeue for every job listed
    assert job_list.run_list(args_of("list", "--json"), api_for=api_for) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in doc] == ["new", "moved", "old"]
    assert doc[2]["groups"]["1"] == {"job_id": old.groups[1], "state": "FAILED"}
    assert doc[2]["lighthouse"] == {"job_id": old.lighthouse_job_id, "state": "RUNNING"}
    api.calls.clear()
    assert job_list.run_list(args_of("list", "--no-slurm", "--json"), api_for=api_for) == 0
    doc = json.loads(capsys.readouterr().out)
    assert api.calls == [] and doc[0]["state"] is None and doc[1]["state"] == "run dir missing"


def test_list_with_no_jobs_and_as_root(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert main(["list"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("lamplighter list: error: root keeps no index")
    monkeypatch.setattr(os, "geteuid", lambda: USER)
    assert main(["list", "--no-slurm"]) == 0
    assert capsys.readouterr().out.startswith("no jobs in ")


# -- revive ------------------------------------------------------------------------------------------------------


def seen(**over: Any) -> Seen:
    base: dict[str, Any] = {
        "group": 1,
        "job_id": 3,
        "state": "FAILED",
        "reason": None,
        "gave_up": None,
        "spent": None,
        "ended_ago_s": 600.0,
        "completed": False,
        "lighthouse_job_id": 1,
        "lighthouse_state": "RUNNING",
    }
    return Seen(**{**base, **over})


@pytest.mark.parametrize(
    ("over", "refusal"),
    [
        ({"state": "RUNNING"}, "is RUNNING: nothing to revive"),
        ({"state": "RUNNING", "gave_up": "GIVING UP"}, "scancel it first"),
        ({"state": "PENDING", "reason": "BeginTime"}, "is PENDING (BeginTime): queued, not given up"),
        ({"state": "COMPLETED"}, "COMPLETED (its trainer exited 0): never given up"),
        ({"state": "CANCELLED"}, "CANCELLED by a person"),
        ({"ended_ago_s": 5.0}, "ended FAILED 5 s ago within its restart budget"),
        ({"completed": True}, "the job reached its target"),
        ({"gave_up": "GIVING UP", "lighthouse_state": "COMPLETED"}, "Lighthouse (Slurm job 1) has ended (COMPLETED)"),
    ],
)
def test_revive_refuses_a_group_that_runs_or_was_never_given_up(over: dict[str, Any], refusal: str) -> None:
    with pytest.raises(Refused, match=refusal.replace("(", r"\(").replace(")", r"\)")):
        decide(seen(**over))


@pytest.mark.parametrize(
    ("over", "plan"),
    [
        ({"gave_up": "GIVING UP: budget"}, Plan("resubmit", "GIVING UP: budget", False, 1)),
        ({"spent": "GIVING UP: budget spent"}, Plan("resubmit", "GIVING UP: budget spent", False, 1)),
        ({"state": "GONE", "lighthouse_job_id": None, "lighthouse_state": None}, None),
        (
            {"ended_ago_s": 600.0},
            Plan("resubmit", "its Slurm job ended FAILED 600 s ago and nobody requeued it", False, 1),
        ),
        ({"state": "PENDING", "reason": "JobHeldUser"}, Plan("release", "Slurm holds it (JobHeldUser)", False, None)),
        (
            {"state": "PENDING", "reason": "launch_failed_requeued_held", "spent": "spent"},
            Plan("resubmit", "Slurm holds it (launch_failed_requeued_held); spent", True, 1),
        ),
    ],
)
def test_revive_brings_back_what_was_given_up(over: dict[str, Any], plan: Plan | None) -> None:
    got = decide(seen(**over))
    if plan is None:  # forgotten by Slurm, no Lighthouse job (a head-node service): submitted with no dependency
        assert got.how == "resubmit" and got.after is None and "forgotten" in got.why_down
    else:
        assert got == plan


def revive_run(tmp: Path) -> tuple[UserSlurm, Submission, Path]:
    api = UserSlurm(["n1", "n2", "n3", "n4"])
    sub = submitted(tmp, api)
    run = Path(sub.run_dir)
    return api, sub, run


def test_revive_submits_a_given_up_group_afresh_and_why_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api, sub, run = revive_run(tmp_path)
    old = sub.groups[1]
    api.finish(old, exit_code=1)
    (run / ACTIONS_FILE).write_text(give_up_line(old, "unit/g1", 0) + "\n")
    own(run)
    out = revive(run, 1, api, uid=USER, now=1000.0, note="node n3 repaired")
    new = out.new_job_id
    assert out.plan.how == "resubmit" and new is not None and new != old
    assert api.job(new).name == api.job(old).name and api.job(new).restarts == 0
    rec = load(run)
    assert rec.groups == {0: sub.groups[0], 1: new}
    assert rec.extra["revived"][0]["old_job_id"] == old and rec.extra["revived"][0]["new_job_id"] == new
    line = json.loads((run / ACTIONS_FILE).read_text().splitlines()[-1])
    assert line["action"] == "revive" and line["outcome"] == "ok" and line["result"]["new_job_id"] == new
    assert "REVIVED by" in line["reason"] and "restart budget exhausted" in line["reason"]
    assert "node n3 repaired" in line["reason"]
    assert main(["why", str(run)]) == 0
    why = capsys.readouterr().out
    assert f"revive {old}  [ok]" in why and f"afresh as Slurm job {new}" in why
    assert why.index(f"give_up {old}") < why.index(f"revive {old}")
    # Once revived, its new job runs: a second revive is refused.
    own(run)  # the record revive rewrote (as root here: as its user in life)
    with pytest.raises(Refused, match="is RUNNING"):
        revive(run, 1, api, uid=USER, now=1001.0)


def test_revive_releases_a_held_group_with_budget_left(tmp_path: Path) -> None:
    api, sub, run = revive_run(tmp_path)
    own(run)
    api.fail_launch(sub.groups[0])
    out = revive(run, 0, api, uid=USER, now=1000.0)
    assert out.plan.how == "release" and out.new_job_id is None
    assert api.job(sub.groups[0]).state == "RUNNING" and load(run).groups == sub.groups
    assert json.loads((run / ACTIONS_FILE).read_text().splitlines()[-1])["result"]["how"] == "release"


def test_revive_refuses_what_is_not_the_users(tmp_path: Path) -> None:
    api, sub, run = revive_run(tmp_path)
    api.finish(sub.groups[0], exit_code=1)
    if os.geteuid() == 0:  # root's own run dir, the user's Slurm job: root never revives a user's group
        with pytest.raises(Refused, match=f"Slurm job {sub.groups[0]} belongs to uid {USER}, not you"):
            revive(run, 0, api, uid=0, now=1000.0)
    own(run)
    with pytest.raises(Refused, match=f"{run} belongs to uid {USER}, not you"):
        revive(run, 0, api, uid=0, now=1000.0)
    with pytest.raises(Refused, match="belongs to uid"):
        revive(run, 0, api, uid=USER + 1, now=1000.0)
    with pytest.raises(Refused, match=r"has no group 5 \(its groups: 0, 1\)"):
        revive(run, 5, api, uid=USER, now=1000.0)
    dry = revive(run, 0, api, uid=USER, now=1000.0, dry_run=True)
    assert dry.plan.how == "resubmit" and dry.new_job_id is None
    assert load(run).groups == sub.groups and not (run / ACTIONS_FILE).exists()


def test_revive_on_the_command_line_is_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, run = revive_run(tmp_path)
    own(run)
    monkeypatch.setattr(os, "geteuid", lambda: USER + 1)  # someone else: refused before Slurm is asked anything
    assert main(["revive", str(run), "--group", "0"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"lamplighter revive: error: {run} belongs to uid {USER}, not you (uid {USER + 1}): revive it as its owner\n"
    )
    assert main(["revive", str(run)]) == 2  # --group is required
    assert "the following arguments are required: --group" in capsys.readouterr().err


# -- status --watch ----------------------------------------------------------------------------------------------


class RecordedCli:
    """A SlurmCli that answers with output recorded from the real 22.05 cluster, noting each command."""

    def __init__(self, text: str) -> None:
        self.text, self.argv = text, []

    def run(self, cmd: str, *args: str, **_kw: Any) -> str:
        self.argv.append([cmd, *args])
        return self.text


def recorded_sub(tmp: Path) -> Submission:
    # squeue_jobs_by_id.txt: 4711 CANCELLED, 4713 FAILED, 4715 COMPLETED, 4716 RUNNING.
    return Submission("rec", "x.yaml", str(tmp), None, "", 4711, {0: 4713, 1: 4716, 2: 4715}, [], 1.0)


def test_watch_reads_every_job_in_one_squeue_on_recorded_output(tmp_path: Path) -> None:
    cli = RecordedCli((RECORDED / "squeue_jobs_by_id.txt").read_text())
    jobs, error, source = read_jobs(recorded_sub(tmp_path), SlurmActions(cli), None)  # type: ignore[arg-type]
    assert error is None and source == "one squeue"
    assert len(cli.argv) == 1 and cli.argv[0][0] == "squeue" and "--jobs=4711,4713,4715,4716" in cli.argv[0]
    assert {j: i.state for j, i in jobs.items() if i} == {
        4711: "CANCELLED",
        4713: "FAILED",
        4715: "COMPLETED",
        4716: "RUNNING",
    }
    assert jobs[4716] is not None and jobs[4716].node_list == "n1"


def test_watch_takes_the_heads_fresh_table_and_asks_squeue_only_what_it_lacks(tmp_path: Path) -> None:
    fake = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submitted(tmp_path, fake)
    api = Counting(fake)
    folder = tmp_path / "status"
    folder.mkdir()
    infos = {i.job_id: i for i in fake.all_jobs("ll-") if i.job_id != sub.groups[1]}
    publish(folder, table_doc(100.0, "head", infos))
    table = JobTable(folder, 15.0, owner=os.getuid(), clock=lambda: 104.0)
    jobs, error, source = read_jobs(sub, api, table)
    assert error is None and source == "the head's job table (4 s old) and one squeue"
    assert api.calls == ["jobs_by_id"] and set(jobs) == set(sub.all_job_ids())
    assert {i.state for i in jobs.values() if i} == {"RUNNING"}
    publish(folder, table_doc(100.0, "head", {i.job_id: i for i in fake.all_jobs("ll-")}))
    api.calls.clear()
    _, _, source = read_jobs(sub, api, table)
    assert api.calls == [] and source == "the head's job table (4 s old)"
    stale = JobTable(folder, 15.0, owner=os.getuid(), clock=lambda: 200.0)
    _, _, source = read_jobs(sub, api, stale)
    assert api.calls == ["jobs_by_id"] and source == "one squeue"


def test_status_watch_refreshes_every_10_s_with_one_squeue_and_plain_status_is_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submitted(tmp_path, fake, groups=3)
    api = Counting(fake)
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        if len(waits) == 2:
            raise KeyboardInterrupt

    args = args_of("status", sub.run_dir, "--watch")
    assert args.watch == 10.0
    assert job_cli.run_status(args, api=api, sleep=sleep) == 0
    assert waits == [10.0, 10.0]
    assert api.calls == ["jobs_by_id", "nodes"] * 2  # per refresh: one squeue and the nodes, however many groups
    assert capsys.readouterr().out.count("job states from one squeue") == 2
    api.calls.clear()
    assert job_cli.run_status(args_of("status", sub.run_dir), api=api) == 0
    assert api.calls == ["job"] * 4 + ["nodes"]  # plain status: every job's whole record, as before
    assert "job states from" not in capsys.readouterr().out
    assert main(["status", sub.run_dir, "--watch", "0.5"]) == 2
    assert capsys.readouterr().err.startswith("lamplighter status: error: --watch 0.5: at least 2 s")


def test_watch_says_slurm_did_not_answer_instead_of_gone(tmp_path: Path) -> None:
    fake = FakeSlurm(["n1", "n2", "n3", "n4"])
    sub = submitted(tmp_path, fake)
    fake.stop_controller()
    st = collect(sub, fake, 111.0, lighthouse_timeout=0.1, batched=True)
    assert {g["state"] for g in st["groups"].values()} == {"UNKNOWN"} and st["slurm_error"]
    assert "GONE" not in format_table(st)


# -- help and completion -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["logs", "list", "revive", "status"])
def test_each_verbs_help_teaches_with_examples_and_exit_codes(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "exit status:" in out and f"lamplighter {command}" in out


def test_shell_completion_knows_the_new_verbs_and_their_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    out = capsys.readouterr().out
    for word in ("logs", "list", "revive", "--lighthouse", "--no-slurm", "--dry-run", "--follow"):
        assert word in out, word
