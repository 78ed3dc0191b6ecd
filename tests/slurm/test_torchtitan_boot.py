"""A torchtitan job's trainers find lamplighter's launch in the run dir, which their container mounts.

`submit` copies trainer/torchtitan_boot/lamplighter_torchtitan/ into `<run_dir>/boot/` (atomically, again
on every submit, unchanged when it is there) and the group scripts' PYTHONPATH names `<run_dir>/boot`, never
lamplighter's install, which a pyxis container does not see. The copy imports with the standard library
alone, from that folder alone: what a training image without lamplighter has.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lamplighter.configs.schema import JobConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.slurm.submit.render import render_job
from lamplighter.slurm.submit.submission import SubmitError, submit_job
from lamplighter.trainer.adapter import TORCHTITAN_BOOT_DIR, trainer_env
from lamplighter.trainer.boot_copy import BOOT_PACKAGE, LEFTOVER_AGE_S, boot_sources, install_boot

COMMAND = ["{python}", "-m", "torch.distributed.run", "--nnodes={nnodes}", "-m", "torchtitan.train", "--module=m"]


def titan(run_dir: Path, srun_args: list[str] | None = None) -> JobConfig:
    return JobConfig.model_validate(
        {
            "name": "tt",
            "run_dir": str(run_dir),
            "trainer": {"kind": "torchtitan", "command": COMMAND, "env": {"PYTHONPATH": "/img/code"}},
            "groups": {"count": 2},
            "slurm": {"srun_args": srun_args or []},
        }
    )


def never(_addr: str) -> object:
    raise AssertionError("submit without --wait asks the Lighthouse nothing")


def exported_pythonpath(script: Path) -> str:
    line = next(x for x in script.read_text().splitlines() if x.startswith("export PYTHONPATH="))
    return line.removeprefix("export PYTHONPATH=").strip("'")


def test_submit_puts_the_launch_in_the_run_dir_and_the_trainers_path_names_it(tmp_path: Path) -> None:
    run = tmp_path / "shared" / "runs" / "tt"
    mounts = ["--container-image=/img.sqsh", f"--container-mounts={tmp_path / 'shared'}:{tmp_path / 'shared'}"]
    sub = submit_job(titan(run, mounts), FakeSlurm(["n1", "n2", "n3"]), config_path="x.yaml", probe=never)
    boot = run.resolve() / "boot"
    assert {p.name: p.read_bytes() for p in (boot / BOOT_PACKAGE).glob("*.py")} == boot_sources()
    assert (boot / BOOT_PACKAGE / "__main__.py").stat().st_uid == os.getuid()
    for script in sub.scripts[1:]:
        assert exported_pythonpath(Path(script)) == f"{boot}:/img/code"  # the launch first, then the job's own
    assert TORCHTITAN_BOOT_DIR not in Path(sub.scripts[1]).read_text()


def test_render_names_the_same_folder_writes_nothing_and_says_submit_puts_it_there(tmp_path: Path) -> None:
    run = tmp_path / "run"
    scripts = render_job(titan(run), tmp_path / "out", run_files=False)
    assert exported_pythonpath(scripts[1]) == f"{run.resolve() / 'boot'}:/img/code"
    assert "`lamplighter submit` copies lamplighter's torchtitan" in scripts[1].read_text()
    assert not run.exists()


def test_submit_refuses_a_container_that_does_not_mount_the_run_dir(tmp_path: Path) -> None:
    run = tmp_path / "home" / "runs" / "tt"
    api = FakeSlurm(["n1", "n2", "n3"])
    job = titan(run, ["--container-image=/img.sqsh", "--container-mounts=/shared:/shared"])
    with pytest.raises(SubmitError, match=r"run_dir: .* is not in the trainer's container .* --container-mounts"):
        submit_job(job, api, config_path="x.yaml", probe=never)
    assert not run.exists() and api.jobs() == []


def test_the_copy_is_atomic_idempotent_and_replaces_an_old_one(tmp_path: Path) -> None:
    run = tmp_path / "run"
    boot = install_boot(run)
    main = boot / BOOT_PACKAGE / "__main__.py"
    before = main.stat()
    assert install_boot(run) == boot and main.stat().st_ino == before.st_ino  # the same launch: untouched
    main.write_text("raise SystemExit('an older launch')\n")  # an earlier lamplighter's copy
    (boot / BOOT_PACKAGE / "gone.py").write_text("")
    stale = run / ".boot-new-dead"  # a submit killed mid-copy, long ago
    stale.mkdir()
    os.utime(stale, (time.time() - LEFTOVER_AGE_S - 1,) * 2)
    install_boot(run)
    assert {p.name: p.read_bytes() for p in (boot / BOOT_PACKAGE).glob("*.py")} == boot_sources()
    assert sorted(p.name for p in run.iterdir()) == ["boot"]


def test_local_mode_keeps_the_installed_launch_and_slurm_names_the_run_dirs() -> None:
    job = titan(Path("/r"))

    def path(boot_dir: str | None) -> str:
        env = trainer_env(
            job, replica_id=0, attempt=0, lighthouse="l", config_path="c", run_dir="/r", boot_dir=boot_dir
        )
        return env["PYTHONPATH"]

    assert path(None) == f"{TORCHTITAN_BOOT_DIR}:/img/code"  # local mode: no container, the install is there
    assert path("/r/boot") == "/r/boot:/img/code"


STDLIB_ONLY = """
import runpy, sys
boot, fake = sys.argv[1], sys.argv[2]
sys.path[:0] = [boot]
import lamplighter_torchtitan.__main__, lamplighter_torchtitan.patch, lamplighter_torchtitan.fixes
import lamplighter_torchtitan.post_import, lamplighter_torchtitan.step_log
foreign = sorted(
    m for m in sys.modules
    if m.split(".")[0] not in sys.stdlib_module_names and not m.startswith("lamplighter_torchtitan")
    and m not in ("__main__", "_frozen_importlib", "_frozen_importlib_external")
)
assert not foreign, foreign
assert lamplighter_torchtitan.__file__.startswith(boot), lamplighter_torchtitan.__file__
sys.path.insert(1, fake)
sys.argv = ["lamplighter_torchtitan", "wrapper", "--x=1"]
runpy.run_module("lamplighter_torchtitan", run_name="__main__", alter_sys=True)
"""


def test_the_copy_runs_with_the_standard_library_alone_from_its_folder_alone(tmp_path: Path) -> None:
    boot = install_boot(tmp_path / "run")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "wrapper.py").write_text("import sys\nprint('wrapper ran', sys.argv[1:])\n")
    # -I: no PYTHONPATH, no user site, not the current folder; -S: no site-packages (no lamplighter, no torch).
    out = subprocess.run(
        [sys.executable, "-S", "-I", "-c", STDLIB_ONLY, str(boot), str(fake)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "wrapper ran ['--x=1']" in out.stdout
