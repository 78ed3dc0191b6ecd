"""Every CLI error is one line that says what to do, never a traceback; with --json, a JSON document on stdout."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from lamplighter.commands.cli import build_parser, main


def commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def json_commands() -> set[str]:
    return {name for name, p in commands().items() if "--json" in p._option_string_actions}


def failing(tmp: Path) -> dict[str, list[list[str]]]:
    """Per command with --json, invocations that fail: bad arguments, and a run that cannot succeed here."""
    missing = str(tmp / "missing.yaml")
    return {
        "validate": [["validate", "--json", missing], ["validate", "--json", "--bogus"]],
        "render": [],
        "submit": [["submit", "--json", missing]],
        "status": [["status", "--json", "no-such-job"]],
        "why": [["why", "--json", "no-such-job"]],
        "list": [["list", "--json", "--bogus"]],
        "healthcheck": [["healthcheck", "--json", "--config", missing]],
        "nodes": [["nodes", "--json"]],  # no Slurm here (SLURM_CONF is an empty file)
        "node-status": [["node-status", "--json", "--socket", str(tmp / "no.sock")]],
        "hosts": [["hosts", "--json"], ["hosts", "--json", "--config", missing]],
        "plan": [["plan", "--json", "--gpus", "-5"]],
    }


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No Slurm, no jobs, no daemon: a home and a working directory of nothing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    empty = tmp_path / "slurm.conf"  # scontrol fails at once, over three lines (a missing file: after a minute)
    empty.write_text("")
    monkeypatch.setenv("SLURM_CONF", str(empty))
    monkeypatch.delenv("LAMPLIGHTER_DEBUG", raising=False)
    return tmp_path


def error_lines(err: str) -> list[str]:
    """The errors said (validate adds a summary line after its problems, which is not one)."""
    return [line for line in err.splitlines() if line.startswith("error: ") or ": error: " in line]


@pytest.mark.parametrize("command", sorted(commands()))
def test_a_wrong_option_is_one_line_that_points_at_the_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--no-such-option"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"lamplighter {command}: error: ") and f"lamplighter {command} --help" in err


def test_every_json_command_is_covered_here(tmp_path: Path) -> None:
    covered = {name for name, runs in failing(tmp_path).items() if runs}
    assert json_commands() == covered, "a command with --json needs its failing runs in failing()"


@pytest.mark.parametrize("command", sorted(json_commands()))
def test_a_json_command_that_fails_prints_its_error_as_one_json_document(
    command: str, nowhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in failing(nowhere)[command]:
        rc = main(argv)
        out, err = capsys.readouterr()
        assert rc != 0, argv
        doc = json.loads(out)  # the whole of stdout: one document
        message = doc["error"] if "error" in doc else doc["errors"][0]["message"]  # validate's own form
        assert message and "Traceback" not in out + err, (argv, out, err)
        # Without --json: the same error, one line, no JSON.
        plain = [a for a in argv if a != "--json"]
        assert main(plain) == rc
        out, err = capsys.readouterr()
        assert len(error_lines(err)) == 1 and "Traceback" not in err, (plain, err)
        assert not out.lstrip().startswith("{"), (plain, out)
