"""The shipped example configs are valid, and the CLI reports errors with exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lamplighter.configs.loader import load_job, load_node
from lamplighter.configs.schema import node_job_problems

REPO = Path(__file__).resolve().parents[2]
NODE_CONFIGS = ("node.yaml", "head.yaml", "bare-host.yaml")  # the node daemons' configs; every other example is a job
EXAMPLES = sorted(p for p in (REPO / "configs").glob("*.yaml") if p.name not in NODE_CONFIGS)


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"demo.yaml", "slurm-lab.yaml", "llama3-8b-mi325x.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_valid(path: Path) -> None:
    load_job(path)


def test_shipped_node_configs_are_valid_and_hold_only_the_node() -> None:
    node = load_node(REPO / "configs" / "node.yaml")
    head = load_node(REPO / "configs" / "head.yaml")
    assert (node.role, node.gpus) == ("compute", True)
    assert head.role == "head" and not head.gpus
    # The realistic job runs against them as shipped: no rule between them is broken.
    job = load_job(REPO / "configs" / "llama3-8b-mi325x.yaml")
    assert node_job_problems(node, job) == [] and node_job_problems(head, job) == []


def test_shipped_bare_metal_configs_agree() -> None:
    host = load_node(REPO / "configs" / "bare-host.yaml")
    job = load_job(REPO / "configs" / "bare-job.yaml")
    assert host.role == "bare-metal" and host.bare_metal is not None and job.bare_metal is not None
    assert job.placement == "bare-metal" and job.bare_metal.cluster == host.bare_metal.cluster
    assert job.bare_metal.etcd.endpoints == host.bare_metal.etcd.endpoints
    assert node_job_problems(host, job) == []


def test_demo_has_three_groups_and_faults_of_several_kinds() -> None:
    job = load_job(REPO / "configs" / "demo.yaml")
    assert job.groups.count == 3
    assert job.chaos.enabled and len({e.kind for e in job.chaos.schedule}) >= 3


def lamplighter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lamplighter", *args], capture_output=True, text=True, timeout=60)


def test_validate_cli_ok_and_invalid(tmp_path: Path) -> None:
    ok = lamplighter("validate", str(REPO / "configs" / "demo.yaml"))
    assert ok.returncode == 0 and "valid job 'demo'" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ngroups:\n  cont: 2\n")
    r = lamplighter("validate", str(bad))
    assert r.returncode == 2
    assert f"{bad}:3: groups.cont: unknown key 'cont'" in r.stderr and "did you mean 'count'" in r.stderr


def test_validate_json_shows_defaults_and_overrides() -> None:
    r = lamplighter("validate", str(REPO / "configs" / "demo.yaml"), "--json", "--set", "groups.count=5")
    assert r.returncode == 0 and '"count": 5' in r.stdout and '"heartbeat_timeout_ms"' in r.stdout


def test_help_teaches() -> None:
    r = lamplighter("--help")
    assert r.returncode == 0 and "validate" in r.stdout and "LAMPLIGHTER_SET" in r.stdout
    r = lamplighter("validate", "--help")
    assert "examples:" in r.stdout and "--set" in r.stdout


def test_validate_job_with_node_ok() -> None:
    r = lamplighter(
        "validate", str(REPO / "configs" / "llama3-8b-mi325x.yaml"), "--node", str(REPO / "configs" / "head.yaml")
    )
    assert r.returncode == 0, r.stderr
    assert "valid job 'llama3-8b'" in r.stdout and "role head" in r.stdout and "compatible" in r.stdout
    r = lamplighter("validate", "--node", str(REPO / "configs" / "node.yaml"))
    assert r.returncode == 0 and "valid node config (role compute)" in r.stdout


def test_validate_job_with_node_reports_each_broken_rule_on_its_own_line(tmp_path: Path) -> None:
    node = tmp_path / "node.yaml"
    node.write_text("health: {poll_interval_s: 4, probe_deadline_s: 7}\n")
    job = tmp_path / "job.yaml"
    job.write_text("name: j\nhealth: {hang_timeout_s: 6}\ntorchft: {quorum_timeout_s: 5}\n")
    r = lamplighter("validate", str(job), "--node", str(node))
    assert r.returncode == 2
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2, r.stderr
    assert "node health.probe_deadline_s (7 s) must be below the job's health.hang_timeout_s (6 s)" in errors[0]
    assert "node health.poll_interval_s (4 s) must be at most half the job's health.hang_timeout_s (6 s)" in errors[1]
    assert all(f"{job} with {node}" in e for e in errors)
    # Each file alone is valid: only the pair is not.
    assert lamplighter("validate", str(job)).returncode == 0
    assert lamplighter("validate", "--node", str(node)).returncode == 0


def test_validate_without_a_file_is_bad_input() -> None:
    r = lamplighter("validate")
    assert r.returncode == 2 and "give a job config" in r.stderr


def test_validate_a_node_config_given_as_a_job_checks_it_as_a_node_config(capsys: pytest.CaptureFixture[str]) -> None:
    from lamplighter.commands.cli import main

    assert main(["validate", str(REPO / "configs" / "node.yaml")]) == 0
    out = capsys.readouterr()
    assert "looks like a node config (it has role:)" in out.err and "valid node config (role compute)" in out.out
    assert "unknown key" not in out.err


def test_validate_json_of_an_invalid_file_is_a_document_ci_can_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from lamplighter.commands.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ngroups: {cont: 2}\nhealth: {hang_timeout_s: 3}\n")
    assert main(["validate", str(bad), "--json", "--set", "nosuch.key=1"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False and doc["complete"] is True
    assert [(e["file"], e["line"], e["key"]) for e in doc["errors"]] == [
        (str(bad), 2, "groups.cont"),
        ("--set nosuch.key=1", None, "nosuch"),
        (str(bad), 3, "health.hang_timeout_s"),  # a rule across keys, reported with the key errors
    ]
    assert all(e["message"] for e in doc["errors"])


@pytest.mark.parametrize("command", [["supervise"], ["healthcheck"], ["nodes", "resume"]])
def test_the_set_example_of_node_commands_is_valid_for_a_node_config(command: list[str]) -> None:
    import re

    from lamplighter.commands.cli import build_parser

    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices[command[0]]  # type: ignore[union-attr]
    if len(command) > 1:
        sub = sub._subparsers._group_actions[0].choices[command[1]]  # type: ignore[union-attr]
    examples = re.findall(r"--set\s+([a-z_.]+=[^\s)\]]+)", " ".join(sub.format_help().split()))
    assert examples
    for example in examples:
        load_node(REPO / "configs" / "node.yaml", [example])


def test_validate_warns_that_two_groups_do_not_train_through_a_hang() -> None:
    """Found on the lab with nodes of their own: with 2 groups, a hung group's heartbeats stop the other's
    quorum, and the survivor ended at its quorum timeout with the weights. The job is valid; validate says so."""
    two = lamplighter("validate", str(REPO / "configs" / "demo.yaml"), "--set", "groups.count=2")
    three = lamplighter("validate", str(REPO / "configs" / "demo.yaml"), "--set", "groups.count=3")
    assert two.returncode == three.returncode == 0, two.stderr
    assert "groups.count is 2" in two.stderr and "use 3 or more groups" in two.stderr
    assert "quorum_timeout_s (4 s)" in two.stderr  # demo.yaml's
    assert "groups.count" not in three.stderr
