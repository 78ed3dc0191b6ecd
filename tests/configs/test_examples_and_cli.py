"""The shipped example configs are valid, and the CLI reports errors with exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lamplighter.configs.loader import load_job

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "configs").glob("*.yaml"))


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"demo.yaml", "slurm-lab.yaml", "llama3-8b-mi325x.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_valid(path: Path) -> None:
    load_job(path)


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
