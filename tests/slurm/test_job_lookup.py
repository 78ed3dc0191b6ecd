"""A job is found by name wherever its run dir is: the submitting user's index, $LAMPLIGHTER_RUNS, ./runs/<name>;
and a name found nowhere is an error naming where it looked (exit 2), never "nothing happened"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lamplighter.commands.cli import main
from lamplighter.slurm.submit.job_index import find_by_name, index_path, remember
from lamplighter.slurm.submit.submission import JobNotFound, find_run_dir

NOBODY = 65534


def test_a_name_found_nowhere_names_every_place_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("LAMPLIGHTER_RUNS", str(tmp_path / "shared-runs"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(JobNotFound) as e:
        find_run_dir("llama")
    assert str(tmp_path / "shared-runs" / "llama") in str(e.value) and str(tmp_path / "runs" / "llama") in str(e.value)
    assert main(["why", "llama"]) == 2
    err = capsys.readouterr().err
    assert "no job 'llama' found: looked in" in err and "--run-dir" in err and "jobs.json" in err
    assert main(["status", "llama"]) == 2


def test_runs_search_path_and_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "shared" / "llama").mkdir(parents=True)
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    env = {"LAMPLIGHTER_RUNS": f"{tmp_path / 'nothing'}:{tmp_path / 'shared'}", "XDG_STATE_HOME": str(tmp_path)}
    assert find_by_name("llama", tmp_path, env).found == (tmp_path / "shared" / "llama").resolve()
    assert find_by_name("demo", tmp_path, env).found == (tmp_path / "runs" / "demo").resolve()


def test_why_on_a_run_dir_with_no_actions_yet_still_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["why", str(tmp_path)]) == 0
    assert "nothing: no action log yet" in capsys.readouterr().out


def test_root_writes_no_index(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("runs as root only")
    assert remember("llama", str(tmp_path), {"XDG_STATE_HOME": str(tmp_path / "state")}) is None
    assert not (tmp_path / "state").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user (setpriv)")
def test_a_job_submitted_by_a_user_is_found_by_name_from_anywhere(tmp_path: Path) -> None:
    """A real unprivileged user: the index submit writes, then `why NAME` from another folder finds the job."""
    top = Path(tempfile.mkdtemp(prefix="lamplighter-index-"))
    try:
        top.chmod(0o755)
        home, elsewhere, run_dir = top / "home", top / "elsewhere", top / "shared" / "llama"
        for d in (home, elsewhere, run_dir):
            d.mkdir(parents=True)
            os.chown(d, NOBODY, NOBODY)
        (run_dir / "submission.json").write_text("{}")
        (run_dir / "actions.jsonl").write_text("")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": os.pathsep.join(sys.path)}
        as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable]
        code = f"from lamplighter.slurm.submit.job_index import remember; print(remember('llama', {str(run_dir)!r}))"
        wrote = subprocess.run([*as_nobody, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert wrote.returncode == 0 and wrote.stdout.strip() == str(index_path(env)), wrote.stderr
        assert json.loads(index_path(env).read_text())["jobs"]["llama"]["run_dir"] == str(run_dir)
        why = subprocess.run(
            [*as_nobody, "-m", "lamplighter", "why", "llama"],
            env=env,
            cwd=elsewhere,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert why.returncode == 0 and f"run dir {run_dir}" in why.stdout, why.stdout + why.stderr
    finally:
        subprocess.run(["rm", "-rf", str(top)], check=False)
