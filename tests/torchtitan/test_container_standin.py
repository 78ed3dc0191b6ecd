"""The lab's container stand-in shows only the image and the job's mounts, as pyxis does; in it, a torchtitan
job's trainer finds lamplighter's launch in the run dir `submit` copied it to, and not in lamplighter's install.

Needs root (mount namespaces and chroot), as the lab does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lamplighter.configs.container_mounts import Mount
from lamplighter.lab.container_standin import available, parse_mounts, run_in_standin
from lamplighter.trainer.adapter import TORCHTITAN_BOOT_DIR
from lamplighter.trainer.boot_copy import install_boot

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))
# A system and the interpreter, not lamplighter's venv or checkout: what a training image without lamplighter has.
IMAGE = ("/usr", "/bin", "/lib", "/lib64", "/etc", sys.base_prefix)
PYTHON = str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


def test_a_host_path_outside_the_mounts_is_invisible_and_a_mounted_one_is_there(tmp_path: Path) -> None:
    (tmp_path / "hidden").write_text("host only")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "file").write_text("mounted\n")
    (tmp_path / "ro").mkdir()
    mounts = parse_mounts([f"--container-mounts={tmp_path / 'shared'},{tmp_path / 'ro'}:/data:ro"])
    script = (
        f"test -e {tmp_path / 'hidden'} && echo VISIBLE; cat {tmp_path / 'shared' / 'file'}; "
        "touch /data/x 2>/dev/null || echo read-only"
    )
    out = run_in_standin(["/bin/sh", "-c", script], mounts, image=IMAGE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["mounted", "read-only"]
    assert (tmp_path / "hidden").read_text() == "host only" and not (tmp_path / "ro" / "x").exists()


PROBE = """
import sys
sys.path[:0] = sys.argv[1:]
try:
    import lamplighter_torchtitan.__main__
except ImportError as e:
    print("missing:", e)
else:
    print("found:", lamplighter_torchtitan.__file__)
"""


def test_in_the_container_the_launch_is_found_in_the_run_dir_and_not_in_the_install(tmp_path: Path) -> None:
    run = tmp_path / "shared" / "runs" / "tt"
    boot = install_boot(run)
    mounts = [Mount(str(tmp_path / "shared"), str(tmp_path / "shared"))]
    # What the scripts rendered before: PYTHONPATH named lamplighter's install, which the container never sees.
    before = run_in_standin([PYTHON, "-S", "-I", "-c", PROBE, TORCHTITAN_BOOT_DIR], mounts, image=IMAGE)
    assert before.returncode == 0, before.stderr
    assert before.stdout.strip() == "missing: No module named 'lamplighter_torchtitan'"
    after = run_in_standin([PYTHON, "-S", "-I", "-c", PROBE, str(boot)], mounts, image=IMAGE, workdir=str(run))
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == f"found: {boot / 'lamplighter_torchtitan' / '__init__.py'}"
