"""A job.json the daemon cannot use is never silent: the job's run directory is told (so `why` and `status`
show it), the metric says so, and the job is supervised with the fallback: its hangs reported, not acted on."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_node import PID0, FakeNode

from lamplighter.commands.why import run_why
from lamplighter.configs.job_file import FORMAT_KEY, FORMAT_VERSION, job_file_doc
from lamplighter.configs.schema import JobConfig, NodeConfig
from lamplighter.lighthouse.status import LighthouseStatus, parse_status
from lamplighter.rundir.contract import RunPaths, write_json_atomic
from lamplighter.supervisor.health_report import summarize
from lamplighter.supervisor.node_policy import Context, LocalJob, NodePolicyState, TrainerEvent, decide

# A large model's timeouts: what the defaults (hang 30 s, start-up 300 s) would cut short.
BIG = {"hang_timeout_s": 600, "startup_timeout_s": 1200}
METRIC = "lamplighter_job_settings_fallback"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[FakeNode]:
    n = FakeNode(tmp_path)
    try:
        yield n
    finally:
        n.close()
        n.remove()


def run_dir_lines(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "actions.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def fallback_gauge(node: FakeNode, job: str) -> float | None:
    return node.metrics.registry.get_sample_value(METRIC, {"job_name": job})


def start(node: FakeNode, name: str, doc: dict[str, Any], pid: int) -> tuple[Path, Path, int]:
    run_dir, config = node.job_dir(doc)
    job = node.submit(name, 0)
    node.task(pid, job, name, 0, run_dir=run_dir, config=config)
    return run_dir, config, job


def test_an_unknown_format_version_is_said_in_the_run_dir_and_its_hangs_are_only_reported(
    node: FakeNode, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = {**job_file_doc(JobConfig(name="newer", health=BIG)), FORMAT_KEY: FORMAT_VERSION + 1}
    run_dir, config, job = start(node, "newer", newer, PID0 + 700)
    results = node.run(2)
    assert [r["action"] for r in results] == ["report"]
    [notice] = run_dir_lines(run_dir)
    assert notice["action"] == "report" and notice["target"] == str(job)
    reason = notice["reason"]
    assert reason.startswith(f"your settings were not applied: {config}: job.json has format version 2"), reason
    assert "hangs are reported, never acted on" in reason and "hang 30 s" in reason and "start-up 300 s" in reason
    assert notice["jobs"] == [{"job_id": str(job), "group": "newer/g0", "attempt": 0}]
    assert notice["observation"]["hangs"] == "report"
    assert fallback_gauge(node, "newer") == 1.0

    # No progress well past the default start-up timeout (300 s): a hang, said once, never acted on.
    node.run(400, step_s=5.0)
    assert node.slurm.job(job).restarts == 0
    lines = run_dir_lines(run_dir)
    assert [x["action"] for x in lines] == ["report", "report"], lines
    assert "NOT acted on" in lines[1]["reason"] and "settings were not applied" in lines[1]["reason"]
    assert not any(x["action"] in ("kill_local", "requeue") for x in map(json.loads, node.lines))

    # `lamplighter why` shows both; `lamplighter status` shows it on the node daemon's line.
    args = argparse.Namespace(job=str(run_dir), run_dir=None, log=[], json=False)
    assert run_why(args) == 0
    out = capsys.readouterr().out
    assert "your settings were not applied" in out and "NOT acted on" in out
    problems = summarize(node.loop.status(), node.clock.t)["problems"]
    assert any(p.startswith("job newer: settings not applied (job.json has format version 2") for p in problems)

    # Fixed (resubmitted files, or a daemon upgrade): applied at the next read, and said so.
    node.job_dir(job_file_doc(JobConfig(name="newer", health=BIG)))
    node.run(70, step_s=5.0)
    last = run_dir_lines(run_dir)[-1]
    assert last["reason"].startswith("your settings are applied now") and "hang 600 s" in last["reason"]
    assert fallback_gauge(node, "newer") == 0.0
    assert node.loop.status()["jobs"][0]["hangs"] == "act"


def test_a_key_this_daemon_does_not_know_is_said_and_an_exit_is_still_restarted(node: FakeNode) -> None:
    doc = job_file_doc(JobConfig(name="skew", health=BIG))
    doc["health"]["hang_grace_s"] = 5  # a key from a newer CLI
    run_dir, _, job = start(node, "skew", doc, PID0 + 710)
    node.run(2)
    [notice] = run_dir_lines(run_dir)
    assert "your settings were not applied" in notice["reason"] and "health.hang_grace_s" in notice["reason"]
    assert fallback_gauge(node, "skew") == 1.0
    node.run(5)
    assert len(run_dir_lines(run_dir)) == 1  # once per job and reason, not every cycle

    node.gone(PID0 + 710, returncode=1)  # an exit needs no threshold of the job's: acted on as always
    results = node.run(15)
    assert [r["action"] for r in results] == ["requeue"], results  # nothing of it left here to kill
    assert node.slurm.job(job).restarts == 1
    assert fallback_gauge(node, "skew") is None  # its watch ended here: the series goes


def test_a_good_versioned_job_json_is_applied_without_a_word(node: FakeNode) -> None:
    run_dir, _, _ = start(node, "good", job_file_doc(JobConfig(name="good", health=BIG)), PID0 + 720)
    assert node.run(5) == []
    assert run_dir_lines(run_dir) == []
    assert fallback_gauge(node, "good") == 0.0
    [watch] = node.loop.status()["jobs"]
    assert (watch["config_error"], watch["hangs"], watch["hang_timeout_s"]) == (None, "act", 600)
    assert not any(p.startswith("job good") for p in summarize(node.loop.status(), node.clock.t)["problems"])


def test_the_policy_reports_a_hang_of_a_job_on_the_fallback_once_per_attempt_and_acts_on_nothing() -> None:
    cfg = NodeConfig(node_name="n1")
    local = LocalJob("7", "big", 0, 0, ((100, 1),))
    hang = TrainerEvent("hang", "7", 0, "big group 0 hung: no progress for 300 s", group="big/g0", step="0")
    ctx = Context("n1", {"7": local}, hangs_reported={"7": "job.json has format version 2"})
    state, actions = decide(1000.0, NodePolicyState(), [hang], cfg, ctx)
    assert [(a.kind, a.target) for a in actions] == [("report", "7")]
    assert "NOT acted on" in actions[0].reason and "format version 2" in actions[0].reason
    assert actions[0].jobs == (("7", "big/g0", 0),)
    state, again = decide(1001.0, state, [hang], cfg, ctx)
    assert again == []
    # A state written and read back (a daemon restart) remembers it was said.
    state, after_restart = decide(1002.0, NodePolicyState.from_json(state.to_json()), [hang], cfg, ctx)
    assert after_restart == []
    # The same hang of a job on its own settings is acted on (its hung step killed: restart.in_job's default).
    _, acted = decide(1000.0, NodePolicyState(), [hang], cfg, Context("n1", {"7": local}))
    assert [a.kind for a in acted] == ["kill_local"]


RECORDED = Path(__file__).resolve().parents[1] / "lighthouse_status" / "recorded"


def test_a_lighthouse_page_the_daemon_cannot_parse_is_said_in_the_run_dir_and_the_metric(node: FakeNode) -> None:
    """Not an outage that passes (its silence excused meanwhile): the hang check is off while it lasts, so the
    job's run directory says so once, the metric is 1, status shows it; and again once it can be read."""
    pages = {"page": "variant_renamed_labels.html"}

    def fetch(address: str, timeout_s: float) -> LighthouseStatus:
        return parse_status((RECORDED / pages["page"]).read_text())

    node.loop.hang_watches.fetch_lighthouse = fetch  # before the job's first cycle: its watch reads through it
    health = {**BIG, "progress": "lighthouse"}
    run_dir, _, job = start(node, "titan", job_file_doc(JobConfig(name="titan", health=health)), PID0 + 730)
    write_json_atomic(RunPaths(run_dir).lighthouse(), {"address": "http://head01:29777"}, mode=0o644)
    node.run(5)
    [said] = run_dir_lines(run_dir)
    assert said["action"] == "report" and said["target"] == str(job)
    assert said["reason"].startswith("Lighthouse status unreadable: hang check off for this job")
    assert "Current quorum_id" in said["reason"] and said["observation"]["type"] == "lighthouse"
    assert node.metrics.registry.get_sample_value("lamplighter_lighthouse_unreadable", {"job_name": "titan"}) == 1.0
    problems = summarize(node.loop.status(), node.clock.t)["problems"]
    assert "job titan: Lighthouse status unreadable: hang check off for this job" in problems

    pages["page"] = "status_two.html"  # the Lighthouse is one this lamplighter reads again
    node.run(2)
    lines = run_dir_lines(run_dir)
    assert [x["reason"] for x in lines[1:]] == ["Lighthouse status readable again: hang check on for this job"]
    assert node.metrics.registry.get_sample_value("lamplighter_lighthouse_unreadable", {"job_name": "titan"}) == 0.0
