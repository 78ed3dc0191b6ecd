"""`validate` looks at slurm.helper_python where it can, and names the node that needs torchft for it."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from lamplighter.configs.helper_python import check_helper_python
from lamplighter.configs.schema import JobConfig

HOSTILE = "env $(touch pwned) 'q' \"d\" ;x"


def validate(tmp_path: Path, helper: str | None, head: str | None = "head01") -> subprocess.CompletedProcess[str]:
    slurm: dict[str, str] = {} if helper is None else {"helper_python": helper}
    if head:
        slurm["head_node"] = head
    cfg = tmp_path / "job.yaml"
    cfg.write_text("name: j\n" + (_slurm_yaml(slurm) if slurm else ""))
    return subprocess.run(
        [sys.executable, "-m", "lamplighter", "validate", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


def _slurm_yaml(slurm: dict[str, str]) -> str:
    import json

    return "slurm:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in slurm.items())


def test_an_interpreter_here_with_torchft_is_checked_and_its_node_named(tmp_path: Path) -> None:
    r = validate(tmp_path, sys.executable)  # this venv has lamplighter and torchft
    assert r.returncode == 0, r.stderr
    assert f"helpers     {sys.executable} (has lamplighter and torchft here)" in r.stdout
    assert "the Lighthouse's node (head01, slurm.head_node)" in r.stdout and "warning" not in r.stderr


def test_an_interpreter_not_here_cannot_be_checked_and_says_so(tmp_path: Path) -> None:
    r = validate(tmp_path, "/opt/site/venv/bin/python3", head=None)
    assert r.returncode == 0
    assert "slurm.helper_python: not on this machine, so validate cannot check it" in r.stderr
    assert "the Lighthouse's node (any node: set slurm.head_node) needs it with torchft and lamplighter" in r.stderr


def test_an_interpreter_without_torchft_is_named_with_the_node_that_needs_it(tmp_path: Path) -> None:
    # A Python with lamplighter on its path but no torchft: a plain login-node install.
    bare = tmp_path / HOSTILE / "python3"
    bare.parent.mkdir(parents=True)
    site = tmp_path / "site"
    site.mkdir()
    (site / "lamplighter").mkdir()
    (site / "lamplighter" / "__init__.py").write_text("")
    bare.write_text(f'#!/bin/bash\nPYTHONPATH={shlex.quote(str(site))} exec /usr/bin/python3 -S "$@"\n')
    bare.chmod(0o755)
    r = validate(tmp_path, str(bare))
    assert r.returncode == 0
    assert f"{bare} has no torchft here; the Lighthouse's node (head01, slurm.head_node) needs it" in r.stderr
    assert not (tmp_path / "pwned").exists()


def test_a_file_that_does_not_run_is_named(tmp_path: Path) -> None:
    plain = tmp_path / "python3"
    plain.write_text("not a program")
    check = check_helper_python(JobConfig(name="j", slurm={"helper_python": str(plain)}))
    assert check.checked and check.warnings == [
        f"slurm.helper_python: {plain} is not an executable file; the Lighthouse's node (any node: set "
        "slurm.head_node) needs it with torchft and lamplighter; the groups' nodes with lamplighter"
    ]


@pytest.mark.parametrize("name", ["python3", "no-such-python-here"])
def test_a_name_is_looked_up_on_path(name: str) -> None:
    check = check_helper_python(JobConfig(name="j", slurm={"helper_python": name}))
    assert check.interpreter == name and check.checked == (name == "python3")
