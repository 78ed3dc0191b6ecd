"""A plain `pip install` is what every node needs, and it pulls no torch, torchft or matplotlib.

Two checks: every module of the package imports with torch, torchft and
matplotlib made unimportable (their imports are lazy, inside the functions of
the trainer and the plots); and the package installed for real into a fresh
venv, with its real plain dependencies from the package index (pip's cache
makes the second run fast), runs validate, render and supervise --help while
`import torch` fails there.
"""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "torchft", "matplotlib")


def packages() -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    return cfg["options"]["packages"].split()


def test_setup_cfg_plain_requirements_have_no_heavy_or_unused_dependency() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    plain = [line.strip() for line in cfg["options"]["install_requires"].splitlines() if line.strip()]
    names = {r.split("=")[0].split(">")[0].split("<")[0].strip().lower() for r in plain}
    assert not names & {"torch", "torchft-nightly", "matplotlib", "amdsmi", "submitit"}, plain
    extras = cfg["options.extras_require"]
    assert "torch==2.13.0" in extras["trainer"] and "amdsmi==7.0.2" in extras["gpusim"]
    assert "matplotlib" in extras["plots"]


def test_every_module_imports_without_torch_torchft_or_matplotlib() -> None:
    script = textwrap.dedent(
        f"""
        import importlib, json, pkgutil, sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {HEAVY!r}:
                    raise ImportError("blocked " + name)
        sys.meta_path.insert(0, Block())
        done, bad = [], {{}}
        for pkg in {packages()!r}:
            mod = importlib.import_module(pkg)
            for m in pkgutil.iter_modules(mod.__path__, pkg + "."):
                if m.ispkg or m.name.endswith("__main__"):
                    continue
                try:
                    importlib.import_module(m.name)
                    done.append(m.name)
                except ImportError as e:
                    bad[m.name] = str(e)
        print(json.dumps({{"done": done, "bad": bad}}))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["bad"] == {}
    assert len(res["done"]) > 80 and "lamplighter.trainer.main" in res["done"]


def _copy_checkout(dst: Path) -> Path:
    """The files a source install needs (not .venv, build/ or runs/)."""
    src = dst / "lamplighter-src"
    src.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    # lamplighter/ holds links to the top-level folders: copy them as links, and the folders they name.
    shutil.copytree(
        REPO / "lamplighter", src / "lamplighter", symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    for link in (src / "lamplighter").iterdir():
        if link.is_symlink():
            folder = REPO / link.name
            shutil.copytree(folder, src / link.name, ignore=shutil.ignore_patterns("__pycache__"))
    return src


@pytest.mark.integration
def test_plain_install_in_a_fresh_venv_runs_without_torch(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py, bin_dir = env_dir / "bin" / "python", env_dir / "bin"
    src = _copy_checkout(tmp_path)
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)],
        check=True,
        timeout=600,
        capture_output=True,
        text=True,
    )
    torch = subprocess.run([str(py), "-c", "import torch"], capture_output=True, text=True, timeout=60)
    assert torch.returncode != 0 and "No module named 'torch'" in torch.stderr
    freeze = subprocess.run([str(py), "-m", "pip", "freeze"], capture_output=True, text=True, timeout=60).stdout.lower()
    for heavy in ("torch", "torchft", "matplotlib", "amdsmi", "submitit"):
        assert f"\n{heavy}" not in "\n" + freeze, freeze

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bin_dir / "lamplighter"), *args], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )

    v = cli("validate", str(REPO / "configs" / "slurm-lab.yaml"))
    assert v.returncode == 0 and "valid job" in v.stdout, v.stderr
    r = cli("render", str(REPO / "configs" / "slurm-lab.yaml"), "--out", str(tmp_path / "sbatch"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "sbatch" / "group-0.sbatch").read_text().startswith("#!/bin/bash")
    s = cli("supervise", "--help")
    assert s.returncode == 0 and "--config" in s.stdout, s.stderr
    for cmd in (("--help",), ("healthcheck", "--help"), ("nodes", "--help")):
        h = cli(*cmd)
        assert h.returncode == 0, (cmd, h.stderr)
