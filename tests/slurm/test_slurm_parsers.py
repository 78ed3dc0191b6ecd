"""Parsers on output recorded from the real Slurm 22.05 test cluster (tests/slurm/recorded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.slurm.parsers import (
    SQUEUE_SEP,
    ParseError,
    all_jobs_format,
    parse_all_jobs,
    parse_record,
    parse_sbatch_parsable,
    parse_scontrol_job,
    parse_scontrol_jobs,
    parse_scontrol_node,
    parse_scontrol_nodes,
    parse_squeue,
    split_state,
)

REC = Path(__file__).parent / "recorded"


def rec(name: str) -> str:
    return (REC / name).read_text()


def test_sbatch_parsable() -> None:
    assert parse_sbatch_parsable(rec("sbatch_parsable.txt")) == 1
    assert parse_sbatch_parsable("1234;lltest\n") == 1234
    with pytest.raises(ParseError, match="sbatch"):
        parse_sbatch_parsable("sbatch: error: Batch job submission failed\n")
    with pytest.raises(ParseError):
        parse_sbatch_parsable("")


def test_running_job() -> None:
    j = parse_scontrol_job(rec("scontrol_show_job_running.txt"))
    assert (j.job_id, j.name, j.state, j.reason, j.restarts) == (1, "ll-rec-g0", "RUNNING", None, 0)
    assert (j.batch_host, j.node_list, j.requeue, j.exit_code) == ("n1", "n1", True, "0:0")
    assert j.start_time == "2026-11-22T02:20:01"
    assert j.fields["AllocNode:Sid"] == "localhost:3388"
    assert j.fields["StdOut"] == "/tmp/lljobs/1.out"


def test_one_line_form_matches_multi_line() -> None:
    multi = parse_scontrol_job(rec("scontrol_show_job_running.txt"))
    one = parse_scontrol_job(rec("scontrol_o_show_job_running.txt"))
    assert one == multi
    assert {k: v for k, v in one.fields.items() if k != "Power"} == {
        k: v for k, v in multi.fields.items() if k != "Power"
    }


def test_pending_begin_time_with_comment_holding_spaces_and_equals() -> None:
    j = parse_scontrol_job(rec("scontrol_show_job_pending_begintime.txt"))
    assert (j.state, j.reason, j.node_list, j.batch_host) == ("PENDING", "BeginTime", None, None)
    # Multi-line form: the whole line is the comment, even with "Foo=bar" in it.
    assert j.fields["Comment"] == "hello world Foo=bar"
    assert j.fields["EndTime"] == "Unknown"


def test_requeue_cycle_completing_pending_running() -> None:
    completing = parse_scontrol_job(rec("scontrol_show_job_completing.txt"))
    assert (completing.state, completing.restarts) == ("COMPLETING", 1)
    pending = parse_scontrol_job(rec("scontrol_show_job_requeued_pending.txt"))
    assert (pending.state, pending.reason, pending.restarts, pending.pending) == ("PENDING", "BeginTime", 1, True)
    running = parse_scontrol_job(rec("scontrol_show_job_requeued_running.txt"))
    assert (running.state, running.restarts, running.node_list, running.running) == ("RUNNING", 1, "n1", True)


def test_job_after_node_down_and_cancelled() -> None:
    j = parse_scontrol_job(rec("scontrol_show_job_after_node_down.txt"))
    assert (j.state, j.reason, j.restarts, j.node_list) == ("PENDING", "BeginTime", 3, None)
    c = parse_scontrol_job(rec("scontrol_show_job_cancelled.txt"))
    assert c.state == "CANCELLED"


def test_several_jobs() -> None:
    jobs = parse_scontrol_jobs(rec("scontrol_show_job_all.txt"))
    assert [j.job_id for j in jobs] == [1, 2]
    assert parse_scontrol_jobs("No jobs in the system\n") == []
    with pytest.raises(ParseError, match="one job"):
        parse_scontrol_job(rec("scontrol_show_job_all.txt"))


def test_idle_nodes() -> None:
    nodes = parse_scontrol_nodes(rec("scontrol_show_nodes_mixed.txt"))
    assert [n.name for n in nodes] == ["n1", "n2", "n3"]
    one = parse_scontrol_nodes(rec("scontrol_o_show_nodes_mixed.txt"))
    assert [(n.name, n.state, n.reason) for n in one] == [(n.name, n.state, n.reason) for n in nodes]


def test_draining_node_reason_with_spaces_user_and_time() -> None:
    for name in ("scontrol_show_node_draining.txt", "scontrol_o_show_node_draining.txt"):
        n = parse_scontrol_node(rec(name))
        assert (n.state, n.base, n.flags, n.not_responding) == ("MIXED+DRAIN", "MIXED", frozenset({"DRAIN"}), False)
        assert n.reason == "ECC uncorrectable gpu0 (lamplighter)"
        assert (n.reason_user, n.reason_time) == ("root", "2026-11-22T02:20:11")
        assert n.is_drained and n.registered and not n.is_down and not n.available
    assert parse_scontrol_node(rec("scontrol_o_show_node_draining.txt")).fields["OS"].startswith("Linux ")


def test_node_comments_with_spaces_are_kept_whole() -> None:
    nodes = {n.name: n for n in parse_scontrol_nodes(rec("scontrol_show_nodes_comment.txt"))}
    assert nodes["n1"].fields["Comment"] == "lamplighter: resumed 1764230000"
    assert nodes["n2"].fields["Comment"] == "lamplighter: resumed at 1764230000 (checks passed 3 times over 10 min)"
    assert "Comment" not in nodes["n3"].fields  # Slurm prints no Comment line for a node without one


def test_drained_idle_node() -> None:
    n = parse_scontrol_node(rec("scontrol_show_node_drained.txt"))
    assert (n.base, n.is_drained, n.available) == ("IDLE", True, False)


def test_crashed_node_is_down_and_not_responding() -> None:
    n = parse_scontrol_node(rec("scontrol_show_node_down_notresponding.txt"))
    assert n.state == "DOWN+NOT_RESPONDING"
    assert n.is_down and not n.registered and not n.available
    assert (n.reason, n.reason_user) == ("Not responding", "root")


def test_node_marked_down_by_a_watcher() -> None:
    n = parse_scontrol_node(rec("scontrol_show_node_marked_down.txt"))
    assert (n.state, n.is_down, n.reason) == ("DOWN", True, "lamplighter: node silent 5s")
    nodes = {x.name: x for x in parse_scontrol_nodes(rec("scontrol_o_show_nodes_down.txt"))}
    assert (nodes["n1"].available, nodes["n2"].base, nodes["n3"].is_down) == (True, "MIXED", True)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("IDLE", ("IDLE", frozenset(), False)),
        ("DOWN*", ("DOWN", frozenset(), True)),
        ("IDLE+DRAIN", ("IDLE", frozenset({"DRAIN"}), False)),
        ("ALLOCATED+DRAIN*", ("ALLOCATED", frozenset({"DRAIN"}), True)),
        ("IDLE+NOT_RESPONDING", ("IDLE", frozenset({"NOT_RESPONDING"}), False)),
        ("COMPLETING", ("COMPLETING", frozenset(), False)),
    ],
)
def test_split_state(state: str, expected: tuple[str, frozenset[str], bool]) -> None:
    assert split_state(state) == expected


def test_star_state_from_sinfo_style_is_not_registered() -> None:
    n = parse_scontrol_node("NodeName=n2 State=DOWN* Reason=Not responding [slurm@2026-01-01T00:00:00]\n")
    assert (n.is_down, n.registered, n.reason) == (True, False, "Not responding")


def test_reason_without_user_tail_is_kept_whole() -> None:
    n = parse_scontrol_node("NodeName=n1 State=IDLE+DRAIN\n   Reason=plain [not a tail\n")
    assert (n.reason, n.reason_user) == ("plain [not a tail", None)


def test_record_values_with_spaces_in_one_line_form() -> None:
    f = parse_record("JobId=7 JobState=PENDING Reason=ReqNodeNotAvail, UnavailableNodes:n1 Dependency=(null)")
    assert f["Reason"] == "ReqNodeNotAvail, UnavailableNodes:n1"
    assert f["Dependency"] == "(null)"


def test_squeue() -> None:
    entries = parse_squeue(rec("squeue_two_jobs.txt"))
    assert [(e.job_id, e.name, e.state, e.reason, e.nodes, e.user) for e in entries] == [
        (2, "ll-rec-g0", "PENDING", "BeginTime", None, "root"),
        (1, "ll-rec-g0", "RUNNING", None, "n1", "root"),
    ]
    after = parse_squeue(rec("squeue_after_drain.txt"))
    assert after[1].nodes == "n2"
    assert parse_squeue("") == []
    odd = SQUEUE_SEP.join(["5", "name with | and spaces", "RUNNING", "None", "n[1-2]", "root"])
    assert parse_squeue(odd)[0].name == "name with | and spaces"
    with pytest.raises(ParseError, match="squeue"):
        parse_squeue("5|x|RUNNING\n")


MARK = "\x1eq1a2b3\x1e"  # the mark squeue_all_marked.txt was recorded with


def test_all_jobs_on_recorded_output_keeps_a_name_with_a_line_break_and_the_separator() -> None:
    jobs, bad = parse_all_jobs(rec("squeue_all_marked.txt"), MARK)
    assert bad == []
    assert [(j.job_id, j.name, j.state, j.reason, j.node_list, j.batch_host, j.fields["UserName"]) for j in jobs] == [
        (18161601, "ll-plain", "FAILED", "NonZeroExitCode", "n1", "n1", "root"),
        (18161602, "ll-held", "PENDING", "JobHeldUser", None, None, "root"),
        (18161600, "ll-a\nb\x1fc", "RUNNING", None, "n1", "n1", "root"),
    ]
    assert jobs[2].start_epoch is not None and jobs[1].start_epoch is None and jobs[0].user_id == 0


def test_a_name_cannot_forge_another_jobs_record_and_a_bad_record_costs_only_itself() -> None:
    def line(job: str, state: str, name: str, mark: str = MARK) -> str:
        return SQUEUE_SEP.join([job, state, "1001", "n1", "N/A", "0", "n1", "None", "eve", name]) + mark + "\n"

    # The owner of job 7 wrote, before the query, what a record of job 9 would look like (with a guessed mark).
    forged = "x\n" + line("9", "FAILED", "ll-llama-g0", "\x1eguess").rstrip("\n")
    text = line("7", "RUNNING", forged) + line("8", "RUNNING", "ll-llama-g1") + "junk" + MARK + "\n"
    jobs, bad = parse_all_jobs(text, MARK)
    assert [(j.job_id, j.name) for j in jobs] == [(7, forged), (8, "ll-llama-g1")]
    assert bad == ["junk"]
    # A job printed twice is not taken the second time; output cut short is an error.
    jobs, bad = parse_all_jobs(line("8", "RUNNING", "a") + line("8", "FAILED", "b"), MARK)
    assert [(j.job_id, j.state) for j in jobs] == [(8, "RUNNING")] and len(bad) == 1
    with pytest.raises(ParseError, match="not ended by its mark"):
        parse_all_jobs(line("8", "RUNNING", "a") + "9" + SQUEUE_SEP + "RUNNING", MARK)
    assert parse_all_jobs("", MARK) == ([], [])


def test_all_jobs_format_refuses_a_mark_squeue_would_misread() -> None:
    assert all_jobs_format(MARK).endswith("Name:0" + MARK) and all_jobs_format(MARK).count(SQUEUE_SEP) == 9
    for mark in ("", "7abc", "a,b", "a" + SQUEUE_SEP):
        with pytest.raises(ValueError, match="cannot end"):
            all_jobs_format(mark)


def test_malformed_records_raise_with_text() -> None:
    with pytest.raises(ParseError, match="node record"):
        parse_scontrol_nodes("NodeName=n1 Arch=x86_64\n")
    with pytest.raises(ParseError, match="one node"):
        parse_scontrol_node("")


def test_show_config_recorded() -> None:
    from lamplighter.slurm.parsers import parse_show_config

    conf = parse_show_config((REC / "scontrol_show_config.txt").read_text())
    assert conf["ProctrackType"] == "proctrack/cgroup" and conf["TaskPlugin"] == "task/cgroup"
    assert "Configuration data as of 2026-11-27T01:54:46" not in conf


def test_sdiag_time_recorded() -> None:
    from lamplighter.slurm.parsers import parse_sdiag_time

    assert parse_sdiag_time((REC / "sdiag.txt").read_text()) == 1796455888
    with pytest.raises(ParseError, match="sdiag"):
        parse_sdiag_time("Data since      Thu Jan 01 00:00:00 1970 (0)\n")
