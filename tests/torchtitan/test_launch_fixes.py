"""lamplighter's torchtitan launch, without torchtitan: which fixes apply to which version and mode, and the
import hook that patches torchtitan's trainer whenever it is imported (the real torchtitan runs in
test_torchtitan_local.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from lamplighter.trainer.adapter import TORCHTITAN_BOOT_DIR
from lamplighter.trainer.torchtitan_boot.lamplighter_torchtitan.fixes import (
    LR_ON_FAILED_COMMIT,
    TORCHFT_347,
    TORCHTITAN_4598,
    parse_version,
    plan,
)
from lamplighter.trainer.torchtitan_boot.lamplighter_torchtitan.patch import _honour_stop_at, _Run, read_stop_at


@pytest.mark.parametrize(
    ("version", "per_step", "applied"),
    [
        ("0.3.0", True, (TORCHFT_347, TORCHTITAN_4598, LR_ON_FAILED_COMMIT)),
        ("0.3.0+rocm6.4", True, (TORCHFT_347, TORCHTITAN_4598, LR_ON_FAILED_COMMIT)),
        ("0.3.0", False, (TORCHTITAN_4598,)),  # DiLoCo: the quorum runs on the training thread, inner steps are local
        ("0.3.1", True, (TORCHFT_347, LR_ON_FAILED_COMMIT)),  # torchtitan#4598 shipped after 0.3.0
        ("0.4.0", True, ()),  # newer than any release known to have either bug: nothing is patched
        ("", True, ()),  # unknown version: nothing is patched, and the log says so
    ],
)
def test_fixes_are_gated_on_the_version_and_the_mode(version: str, per_step: bool, applied: tuple[str, ...]) -> None:
    p = plan(version, per_step)
    assert p.apply == applied
    for fix in applied:
        assert f"lamplighter: applying fix for {fix} on torchtitan {version}" in "\n".join(p.notes)


def test_fixes_off_are_said_not_applied() -> None:
    p = plan("0.3.0", per_step=True, enabled=False)
    assert p.apply == ()
    assert any(f"NOT applying fix for {TORCHFT_347}" in n for n in p.notes)


def test_versions_parse_as_numbers() -> None:
    assert parse_version("0.3.0") == (0, 3, 0)
    assert parse_version("0.3.1.dev20260901") == (0, 3, 1)
    assert parse_version("0.10.0") > parse_version("0.9.9")


def test_the_launch_patches_the_trainer_module_whenever_it_is_imported(tmp_path: Path) -> None:
    """The launch runs the command's module as __main__; the patch lands when torchtitan's trainer module is
    imported, even by a wrapper that runs first (the lab's CPU enablement)."""
    fake = tmp_path / "fake"
    (fake / "torchtitan" / "experiments" / "torchft").mkdir(parents=True)
    for d in ("torchtitan", "torchtitan/experiments", "torchtitan/experiments/torchft"):
        (fake / d / "__init__.py").write_text("")
    (fake / "torchtitan" / "experiments" / "torchft" / "trainer.py").write_text(
        "class FaultTolerantTrainer:\n    def train_step(self, it):\n        return 'original'\n"
    )
    (fake / "wrapper.py").write_text(
        "import sys\n"
        "from torchtitan.experiments.torchft.trainer import FaultTolerantTrainer as T\n"
        "print(T.train_step.__qualname__, sys.argv[1:])\n"
    )
    env = {"PYTHONPATH": f"{TORCHTITAN_BOOT_DIR}:{fake}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-m", "lamplighter_torchtitan", "wrapper", "--x=1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split() == ["patch.<locals>.train_step", "['--x=1']"], out.stderr


def test_the_jobs_stop_at_lowers_torchtitans_training_steps(tmp_path: Path) -> None:
    """`<run_dir>/stop-at` ends a torchtitan job that trains "until told" (rundir/stop_at.py), as it does the
    reference trainer's: training.steps drops to it, never below the step the trainer is at; a link is not
    followed."""
    run = _Run(False, None, False, False, None, None, None, stop_at=tmp_path / "stop-at")
    trainer = SimpleNamespace(step=40, config=SimpleNamespace(training=SimpleNamespace(steps=100_000)))
    _honour_stop_at(trainer, run)
    assert trainer.config.training.steps == 100_000  # no file yet
    (tmp_path / "elsewhere").write_text("10\n")
    (tmp_path / "stop-at").symlink_to(tmp_path / "elsewhere")
    assert read_stop_at(tmp_path / "stop-at") is None
    (tmp_path / "stop-at").unlink()
    (tmp_path / "stop-at").write_text("60\n")
    _honour_stop_at(trainer, run)
    assert trainer.config.training.steps == 100_000  # looked less than a second ago
    run.stop_read = 0.0
    _honour_stop_at(trainer, run)
    assert trainer.config.training.steps == 60
    (tmp_path / "stop-at").write_text("30\n")
    run.stop_read = 0.0
    _honour_stop_at(trainer, run)
    assert trainer.config.training.steps == 40  # past it: stops now
