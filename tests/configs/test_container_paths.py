"""validate refuses a container job whose trainers would not see, at the same path, what the scripts name.

With pyxis (`slurm.srun_args: --container-image=... --container-mounts=SRC:DST,...`) the trainer sees the
image and its mounts only; the run dir (job.json, `<run_dir>/boot` with lamplighter's torchtitan launch, the
step logs) must be mounted at its own path, or every rank fails on `No module named lamplighter_torchtitan`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lamplighter.commands.cli import main
from lamplighter.commands.init import job_file
from lamplighter.configs.container_mounts import Mount, container_mounts
from lamplighter.configs.schema import JobConfig, container_path_problems

IMAGE = "--container-image=/shared/images/tt.sqsh"


def titan(run_dir: str, *srun: str, command: list[str] | None = None, **trainer: object) -> JobConfig:
    cmd = command or ["{python}", "-m", "torch.distributed.run", "-m", "torchtitan.train", "--module=m"]
    return JobConfig.model_validate(
        {
            "name": "tt",
            "run_dir": run_dir,
            "trainer": {"kind": "torchtitan", "command": cmd, **trainer},
            "slurm": {"srun_args": list(srun)},
        }
    )


def problems(job: JobConfig, on_host: bool = False) -> list[tuple[str, str]]:
    return container_path_problems(job, job.run_dir or "", on_host=lambda _p: on_host)


def test_pyxis_mount_syntax() -> None:
    assert container_mounts(["--container-mounts=/a:/b:ro+rprivate,/c,/d/:/d", "--container-mount-home"], "/h") == [
        Mount("/a", "/b", True),
        Mount("/c", "/c"),
        Mount("/d", "/d"),
        Mount("/h", "/h"),
    ]


def test_a_run_dir_outside_every_mount_is_an_error_naming_the_key_and_the_fix() -> None:
    found = problems(titan("/home/u/runs/tt", IMAGE, "--container-mounts=/shared:/shared"))
    assert [k for k, _ in found] == ["run_dir"]
    msg = found[0][1]
    assert "/home/u/runs/tt is not in the trainer's container (--container-mounts: /shared:/shared)" in msg
    assert "lamplighter's torchtitan launch (boot/)" in msg
    assert "add /home/u/runs/tt:/home/u/runs/tt (or a folder above it) to --container-mounts" in msg
    # No --container-mounts at all: the same, "none".
    assert "(--container-mounts: none)" in problems(titan("/shared/runs/tt", IMAGE))[0][1]


@pytest.mark.parametrize(
    ("mounts", "why"),
    [
        ("--container-mounts=/shared:/data", "is not in the trainer's container"),  # mounted elsewhere only
        ("--container-mounts=/data:/shared", "mounted at another path"),  # /shared inside is the host's /data
        ("--container-mounts=/shared:/shared:ro", "mounted read-only"),
        ("--container-mounts=/shared:/shared,/x:/shared/runs", "mounted at another path"),  # a deeper mount wins
    ],
)
def test_what_the_container_shows_at_the_run_dirs_path_decides(mounts: str, why: str) -> None:
    found = problems(titan("/shared/runs/tt", IMAGE, mounts))
    assert len(found) == 1 and why in found[0][1], found


def test_mounted_at_its_own_path_passes_and_jobs_without_a_container_or_lamplighter_files_are_not_checked() -> None:
    assert problems(titan("/shared/runs/tt", IMAGE, "--container-mounts=/scratch:/scratch,/shared")) == []
    assert problems(titan("/home/u/runs/tt", "--mpi=pmix")) == []  # no container: the host's paths
    custom = JobConfig.model_validate(
        {"name": "c", "run_dir": "/home/u/r", "trainer": {"command": ["x"]}, "slurm": {"srun_args": [IMAGE]}}
    )
    assert container_path_problems(custom, "/home/u/r") == []  # a custom trainer reads none of lamplighter's files


def test_the_paths_a_torchtitan_command_names_are_checked_too() -> None:
    cmd = ["{python}", "-m", "torchtitan.train", "--dump_folder=/home/u/dump", "--job.config_file", "/home/u/c.toml"]
    job = titan("/shared/runs/tt", IMAGE, "--container-mounts=/shared:/shared", command=cmd,
                env={"PYTHONPATH": "/shared/code:/home/u/code:/opt/image/code"})  # fmt: skip
    keys = [k for k, _ in problems(job, on_host=True)]
    assert (
        keys
        == ["trainer.command (--dump_folder)", "trainer.command (--job.config_file)"] + ["trainer.env.PYTHONPATH"] * 2
    )  # /home/u/code and /opt/image/code (both on this host, neither mounted)
    # PYTHONPATH folders this machine does not have may be the image's: not an error.
    assert [k for k, _ in problems(job, on_host=False)] == keys[:2]


def test_validate_refuses_the_job_and_accepts_the_template_init_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    assert main(["init", "--torchtitan", "--name", "llama", str(job)]) == 0
    doc = yaml.safe_load(job.read_text())
    assert doc["run_dir"].startswith("/shared/") and "--container-mounts=/shared:/shared" in doc["slurm"]["srun_args"]
    assert problems(JobConfig.model_validate(doc)) == []  # the template's run_dir is under its mount
    capsys.readouterr()
    assert main(["validate", str(job)]) == 0
    capsys.readouterr()
    job.write_text(job_file("torchtitan", "llama").replace("run_dir: /shared/runs/llama", f"run_dir: {tmp_path}/r"))
    assert main(["validate", str(job)]) == 2
    err = capsys.readouterr().err
    assert f"error: {job}: run_dir: {tmp_path.resolve()}/r is not in the trainer's container" in err
    assert main(["validate", str(job), "--json"]) == 2
    errors = json.loads(capsys.readouterr().out)["errors"]
    assert [e["key"] for e in errors] == ["run_dir"]
