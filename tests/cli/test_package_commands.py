"""The commands that need only the package: init, deploy-files, --version, completion."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lamplighter.commands.cli import main
from lamplighter.commands.deploy_files import FILES, write_all
from lamplighter.commands.init import TEMPLATES, job_file
from lamplighter.configs.loader import load_job
from lamplighter.system import installed

REPO = Path(__file__).resolve().parents[2]


def lamplighter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lamplighter", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
def test_init_writes_a_job_that_validates_as_written_and_marks_what_to_change(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    assert main(["init", f"--{kind}", "--name", "llama", str(path)]) == 0
    job = load_job(path)
    assert job.name == "llama" and job.trainer.resolved_kind == kind
    text = path.read_text()
    assert text.count("# CHANGE") >= 8 and "partition" in text
    if kind == "torchtitan":
        # Per-step FT: no semi-sync method; lamplighter adds the fault-tolerance flags itself.
        assert "semi_sync" not in text and "--fault_tolerance" not in "".join(job.trainer.command or [])
        # The config module the job names, beside it, as the package holds it (a wheel user has no checkout).
        module = tmp_path / "llama3_8b_ft.py"
        assert module.read_text() == (REPO / "configs" / "torchtitan" / "llama3_8b_ft.py").read_text()
        assert "--module=llama3_8b_ft" in job.trainer.command or []
    else:
        assert not (tmp_path / "llama3_8b_ft.py").exists()


def test_init_refuses_to_overwrite_and_a_bad_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("mine")
    assert main(["init", "--torchtitan", str(path)]) == 2
    assert path.read_text() == "mine" and "--force" in capsys.readouterr().err
    assert main(["init", "--torchtitan", "--force", str(path)]) == 0 and "name: job" in path.read_text()
    assert main(["init", "--custom", "--name", "a b"]) == 2
    with pytest.raises(ValueError):
        job_file("custom", "../x")


def test_init_to_stdout_and_its_help_teaches(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--torchtitan"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# A torchtitan 0.3 job") and "name: my-job" in out
    with pytest.raises(SystemExit) as e:
        main(["init", "--help"])
    assert e.value.code == 0
    h = capsys.readouterr().out
    assert "examples:" in h and "CHANGE" in h and "lamplighter validate" in h
    assert main(["init"]) == 2  # a kind is required
    assert "lamplighter init: error: one of the arguments" in capsys.readouterr().err


def test_deploy_files_are_every_deploy_file_but_the_standbys() -> None:
    shipped = {f.path for f in FILES if f.package == "lamplighter.deploy"}
    on_disk = {
        str(p.relative_to(REPO / "deploy"))
        for p in (REPO / "deploy").rglob("*")
        if p.is_file() and (p.suffix != ".md" or p.name == "RUNBOOK.md") and "standby" not in p.name
    }
    # The READMEs are the repository's; the runbook is the alerts' (their runbook_url), so it ships.
    assert shipped == on_disk


def test_deploy_files_writes_with_modes_and_refuses_to_overwrite(tmp_path: Path) -> None:
    written = write_all(tmp_path, force=False)
    assert len(written) == len(FILES)
    unit = tmp_path / "systemd" / "lamplighter-node.service"
    assert unit.read_bytes() == (REPO / "deploy" / "systemd" / "lamplighter-node.service").read_bytes()
    assert (tmp_path / "slurm" / "lamplighter-prolog").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "etc" / "node.yaml").read_text() == (REPO / "configs" / "node.yaml").read_text()
    unit.write_text("edited")
    with pytest.raises(FileExistsError, match="--force"):
        write_all(tmp_path, force=False)
    assert unit.read_text() == "edited"  # nothing written when one exists
    write_all(tmp_path, force=True)
    assert unit.read_text().startswith("# lamplighter")


def test_version_lists_what_is_installed_without_importing_torch() -> None:
    code = (
        "import sys; from lamplighter.commands.cli import main; main(['--version']); "
        "print('torch imported' if 'torch' in sys.modules else 'torch not imported')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("lamplighter ") and lines[-1] == "torch not imported", r.stdout + r.stderr
    assert [ln.split()[0] for ln in lines[1:-1]] == ["torchft", "torch", "amdsmi", "rocm", "slurm"]


def test_versions_say_not_installed_for_what_is_absent(tmp_path: Path) -> None:
    assert installed.dist_version("no-such-distribution-here") == installed.NOT_INSTALLED
    assert installed.rocm_version({"ROCM_PATH": str(tmp_path)}) == installed.NOT_INSTALLED
    (tmp_path / ".info").mkdir()
    (tmp_path / ".info" / "version").write_text("6.4.1-120\n")
    assert installed.rocm_version({"ROCM_PATH": str(tmp_path)}) == "6.4.1-120"


def test_completion_script_knows_the_commands_and_their_options() -> None:
    r = lamplighter("completion", "bash")
    assert r.returncode == 0
    for word in ("init", "deploy-files", "node-status", "--torchtitan", "--cluster-status-dir"):
        assert word in r.stdout, word
    check = subprocess.run(["bash", "-n"], input=r.stdout, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
