"""Observe-only rollout (node.yaml mode: observe), and the head's answer to a silent node."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_node import PID0, FakeNode

from lamplighter.configs.schema import JobConfig, NodeConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.rundir.action_history import history, parse_lines, render
from lamplighter.rundir.actions import ActionLog
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.parsers import QueueEntry, node_from_fields
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.head.loop import HeadLoop, decide_nodes
from lamplighter.supervisor.state_store import DaemonState


@pytest.fixture
def node(tmp_path: Path) -> Iterator[FakeNode]:
    n = FakeNode(tmp_path, mode="observe")
    try:
        yield n
    finally:
        n.close()
        n.remove()


def test_observe_mode_decides_and_logs_every_action_and_takes_none(node: FakeNode) -> None:
    run_dir, config = node.job_dir(JobConfig(name="llama", health={"progress": "off"}, restart={"in_job": 0}))
    job = node.submit("llama", 1)
    node.task(PID0 + 1, job, "llama", 1, run_dir=run_dir, config=config)
    assert node.run(2) == []
    node.gone(PID0 + 1, returncode=1)
    results = node.run(12)
    assert [(r["action"], r["outcome"]) for r in results] == [("requeue", "observed")]
    assert node.slurm.job(job).restarts == 0  # nothing done in Slurm
    [line] = [json.loads(x) for x in node.lines]
    assert line["outcome"] == "observed" and line["reason"].startswith("would requeue: llama group 1 trainer pid")
    # The job's run directory holds it too, and `lamplighter why` shows it.
    records, _ = parse_lines((run_dir / "actions.jsonl").read_text().splitlines())
    text = render(history(records, {str(job): "llama/g1"}, "llama"), "llama")
    assert "requeue" in text and "[observed]" in text and "would requeue" in text
    # Journaled as an event, not as an intent: nothing pending for a restarted daemon to finish.
    assert [(e["type"], e["kind"]) for e in node.state.events()] == [("event", "would_requeue")]
    assert node.state.snapshot()["pending"] == {}


def silent(name: str, state: str, reason: str | None = None) -> dict[str, object]:
    fields = {"NodeName": name, "State": state, **({"Reason": reason} if reason else {})}
    return {"info": node_from_fields(fields)}


def test_a_silent_node_is_drained_and_its_groups_moved_unless_slurm_sees_it_not_responding() -> None:
    cfg = NodeConfig(role="head", node_silence_s=5.0, max_drain_fraction=0.5)
    nodes = {n: node_from_fields({"NodeName": n, "State": "MIXED"}) for n in ("n1", "n2", "n3", "n4")}
    groups = {"n2": [(17, "ll-demo-g0"), (18, "ll-demo-g1")]}
    # Silent to the head's probe, fine to Slurm: drained (no new jobs), the lamplighter groups moved, nobody killed.
    acts = decide_nodes(100.0, {"n2": 90.0}, nodes, [], cfg, groups)
    assert [(a.kind, a.target) for a in acts] == [("drain", "n2"), ("requeue", "17"), ("requeue", "18")]
    assert "Slurm still sees it" in acts[0].reason and acts[1].exclude_node == "n2"
    # Not silent long enough: nothing.
    assert decide_nodes(100.0, {"n2": 97.0}, nodes, [], cfg, groups) == []
    # Slurm reports it not responding too: marked DOWN, as the node-wide evidence it is.
    nodes["n2"] = node_from_fields({"NodeName": "n2", "State": "MIXED*"})
    acts = decide_nodes(100.0, {"n2": 90.0}, nodes, [], cfg, groups)
    assert [(a.kind, a.target) for a in acts] == [("mark_down", "n2")]
    assert "Slurm reports it not responding" in acts[0].reason
    # Drained by us already, still silent, Slurm still fine: only groups left there are moved.
    nodes["n2"] = node_from_fields(
        {"NodeName": "n2", "State": "MIXED+DRAIN", "Reason": "lamplighter: slurmd on n2 silent [root@x]"}
    )
    assert [a.kind for a in decide_nodes(100.0, {"n2": 90.0}, nodes, [], cfg, groups)] == ["requeue", "requeue"]
    # It answers again, and Slurm sees it up: the head's own drain is lifted (nobody else's ever is).
    nodes["n2"] = node_from_fields(
        {"NodeName": "n2", "State": "IDLE+DRAIN", "Reason": "lamplighter: slurmd on n2 silent for 6 s [root@x]"}
    )
    [resume] = decide_nodes(100.0, {}, nodes, [], cfg, groups)
    assert (resume.kind, resume.target) == ("resume", "n2") and "answers again" in resume.reason
    nodes["n2"] = node_from_fields(
        {"NodeName": "n2", "State": "DOWN+DRAIN*", "Reason": "lamplighter: slurmd on n2 silent for 6 s [root@x]"}
    )
    assert decide_nodes(100.0, {}, nodes, [], cfg, groups) == []  # Slurm still sees it down: not yet
    # Someone else's drain: left alone.
    nodes["n2"] = node_from_fields({"NodeName": "n2", "State": "MIXED+DRAIN", "Reason": "maintenance [admin@x]"})
    assert decide_nodes(100.0, {"n2": 90.0}, nodes, [], cfg, groups) == []
    assert decide_nodes(100.0, {}, nodes, [], cfg, groups) == []


def test_the_rate_limit_holds_for_a_silent_node_too() -> None:
    cfg = NodeConfig(role="head", node_silence_s=5.0, max_drain_fraction=0.25)
    nodes = {n: node_from_fields({"NodeName": n, "State": "MIXED"}) for n in ("n1", "n2", "n3", "n4")}
    acts = decide_nodes(100.0, {"n2": 90.0}, nodes, [(50.0, "n3")], cfg, {"n2": [(17, "ll-demo-g0")]})
    assert [a.kind for a in acts] == ["log"] and acts[0].reason.startswith("NOT DRAINING n2")


def test_a_silent_node_holding_only_lamplighter_groups_is_marked_down_after_agreeing_probes() -> None:
    cfg = NodeConfig(role="head", node_silence_s=5.0, max_drain_fraction=0.5)
    nodes = {n: node_from_fields({"NodeName": n, "State": "MIXED"}) for n in ("n1", "n2", "n3", "n4")}
    groups = {"n2": [(17, "ll-demo-g0")]}

    def kinds(others: dict[str, int] | None, probes: int, history: list[tuple[float, str]] | None = None) -> list:
        acts = decide_nodes(100.0, {"n2": 90.0}, nodes, history or [], cfg, groups, None, others, {"n2": probes})
        return acts

    # Slurm says nothing else holds it, and three probes in a row found it silent: DOWN, so that Slurm frees the
    # group now instead of holding it COMPLETING until SlurmdTimeout.
    [down] = kinds({"n2": 0}, 3)
    assert (down.kind, down.target) == ("mark_down", "n2")
    assert "every job Slurm has on it is a lamplighter group's" in down.reason
    assert down.observation["failed_probes"] == 3 and down.observation["other_jobs"] == 0
    # Another tenant's job there: drained and the groups moved, nobody else's job killed.
    assert [a.kind for a in kinds({"n2": 1}, 5)] == ["drain", "requeue"]
    # Too few probes agree, or Slurm could not say who holds the node: the drain, as before.
    assert [a.kind for a in kinds({"n2": 0}, 2)] == ["drain", "requeue"]
    assert [a.kind for a in kinds(None, 5)] == ["drain", "requeue"]
    # The rate limit holds for it too.
    cfg = NodeConfig(role="head", node_silence_s=5.0, max_drain_fraction=0.25)
    [refused] = kinds({"n2": 0}, 3, [(50.0, "n3")])
    assert refused.kind == "log" and refused.reason.startswith("NOT MARKING n2 DOWN")


class Updates:
    """`scontrol update` and `write batch_script` as the head's executor sends them (the fake has no CLI)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, dict[str, str]]] = []

    def update_job(self, job_id: int, settings: dict[str, str]) -> None:
        self.sent.append((job_id, settings))

    def batch_script(self, job_id: int) -> str:
        return "#!/bin/bash\n#SBATCH --exclude=n6\n"


def test_a_group_of_a_dead_node_starts_off_every_node_of_its_last_allocation(tmp_path: Path) -> None:
    """Found by CI: a two-node group whose first node crashed was started at once on its surviving node, whose
    slurmd had revoked the job's credential ("Job credential revoked"), and Slurm requeued it a second time."""
    slurm = FakeSlurm([f"n{i}" for i in range(1, 7)])
    script = tmp_path / "g1.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=ll-mn-g1\n#SBATCH --nodes=2\n")
    job = slurm.submit(script)
    last = slurm.job(job).node_list
    assert last is not None and len(expand_hostlist(last)) == 2
    slurm.requeue(job)  # as Slurm does when the head marks the node down
    updates = Updates()
    cfg = NodeConfig.model_validate({"role": "head", "state_dir": str(tmp_path / "state")})
    executor = Executor(DaemonState.load(tmp_path / "head"), slurm, updates, ActionLog("head", lambda line: None))
    head = HeadLoop(cfg, slurm, executor, time.time, tmp_path / "logs")
    dead = expand_hostlist(last)[0]
    head._restart_jobs_of(dead, [QueueEntry(job, "ll-mn-g1", "RUNNING", None, last, "root")])
    [(jid, settings)] = updates.sent
    assert jid == job and settings["StartTime"] == "now"
    assert set(settings["ExcNodeList"].split(",")) == {"n6", *expand_hostlist(last)}
