"""A plain `pip install` is what every node needs, and it pulls no torch, torchft or matplotlib.

Three checks: every module of the package imports with torch, torchft and
matplotlib made unimportable (their imports are lazy, inside the functions of
the trainer and the plots); `python -m build` makes an sdist and a wheel that
pass `twine check`, the wheel carrying the deploy files; and that wheel,
installed for real into a fresh venv with its real plain dependencies from the
package index (pip's cache makes the second run fast), works as a user
without root would use it (--version, init, validate, render, deploy-files,
completion, --help) while `import torch` fails there.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import venv
import zipfile
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


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """`python -m build` of a copy of the checkout: the sdist, and the wheel built from it (as a release)."""
    tmp = tmp_path_factory.mktemp("dist")
    src = _copy_checkout(tmp)
    out = tmp / "dist"
    # --no-isolation: this venv's setuptools builds it, with no download (`make dist` builds isolated).
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
        check=True,
        timeout=300,
        capture_output=True,
        text=True,
    )
    found = sorted(out.iterdir())
    assert sorted(p.suffix for p in found) == [".gz", ".whl"], found
    return found


@pytest.mark.integration
@pytest.mark.xdist_group("packaging")
def test_sdist_and_wheel_pass_twine_check_and_the_wheel_carries_the_deploy_files(dists: list[Path]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dists)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.count("PASSED") == 2, out.stdout + out.stderr
    wheel = next(p for p in dists if p.suffix == ".whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    from lamplighter.commands.deploy_files import FILES

    for f in FILES:
        prefix = "lamplighter/deploy/" if f.package == "lamplighter.deploy" else "lamplighter/configs/"
        assert prefix + f.path in names, f.path
    assert not any("standby" in n for n in names if n.startswith("lamplighter/deploy/")), "#27 removes the standbys"
    # The rig stays in the checkout: no test cluster, demos or simulated GPUs on a node.
    rig = sorted(n for n in names if n.startswith(("lamplighter/lab/", "lamplighter/gpusim/")))
    assert rig == [], rig[:5]
    assert "lamplighter/commands/cli.py" in names and "lamplighter/supervisor/node/loop.py" in names
    sdist = next(p for p in dists if p.suffix == ".gz")
    with tarfile.open(sdist) as tar:
        assert any(n.endswith("lamplighter/deploy/prometheus/lamplighter-alerts.yml") for n in tar.getnames())


@pytest.mark.integration
@pytest.mark.heavy(seconds=90)
@pytest.mark.xdist_group("packaging")
def test_the_wheel_in_a_fresh_venv_runs_without_torch_or_root(dists: list[Path]) -> None:
    # Not under pytest's tmp_path (root's alone): the commands below run as nobody when we are root.
    tmp_path = Path(tempfile.mkdtemp(prefix="lamplighter-wheel-"))
    tmp_path.chmod(0o755)
    try:
        _install_and_use(tmp_path, next(p for p in dists if p.suffix == ".whl"))
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _install_and_use(tmp_path: Path, wheel: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py, bin_dir = env_dir / "bin" / "python", env_dir / "bin"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
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

    # As a user without root would: setpriv drops to nobody when we are root (the CI machine).
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, 65534, 65534) if drop else None
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*drop, str(bin_dir / "lamplighter"), *args], capture_output=True, text=True, timeout=120, cwd=home, env=env
        )

    version = cli("--version")
    assert version.returncode == 0 and "torchft  not installed" in version.stdout, version.stdout + version.stderr
    assert "amdsmi   not installed" in version.stdout
    init = cli("init", "--torchtitan", "--name", "llama", str(home / "job.yaml"))
    assert init.returncode == 0, init.stderr
    assert "CommConfig" in (home / "llama3_8b_ft.py").read_text()  # the config module the job names, from the wheel
    v = cli("validate", str(home / "job.yaml"))
    assert v.returncode == 0 and "valid job 'llama'" in v.stdout, v.stderr
    r = cli("render", str(REPO / "configs" / "slurm-lab.yaml"), "--out", str(home / "sbatch"))
    assert r.returncode == 0, r.stderr
    assert (home / "sbatch" / "group-0.sbatch").read_text().startswith("#!/bin/bash")
    # The job init wrote, rendered: only --out is written (its run_dir, /shared/runs/llama, is not made).
    before = sorted(p.name for p in home.iterdir())
    r = cli("render", str(home / "job.yaml"), "--out", str(home / "llama-sbatch"))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in home.iterdir()) == sorted([*before, "llama-sbatch"])
    assert (home / "llama-sbatch" / "lighthouse.sbatch").exists() and not Path("/shared/runs/llama").exists()
    # plan's measured inputs ship with the wheel: it prints them with their sources, no checkout needed.
    plan = cli("plan", "--gpus", "1024", "--model", "8b")
    assert plan.returncode == 0 and "fault_cost.json@" in plan.stdout, plan.stderr
    d = cli("deploy-files", "--out", str(home / "deploy"))
    assert d.returncode == 0, d.stderr
    assert (home / "deploy" / "systemd" / "lamplighter-node.service").read_text().startswith("# lamplighter")
    assert (home / "deploy" / "slurm" / "lamplighter-healthcheck").stat().st_mode & 0o777 == 0o755
    again = cli("deploy-files", "--out", str(home / "deploy"))
    assert again.returncode == 2 and "--force" in again.stderr
    comp = cli("completion", "bash")
    assert comp.returncode == 0 and "deploy-files" in comp.stdout and "--torchtitan" in comp.stdout, comp.stderr
    for cmd in (
        ("--help",),
        ("local", "--help"),
        ("supervise", "--help"),
        ("healthcheck", "--help"),
        ("nodes", "--help"),
    ):
        h = cli(*cmd)
        assert h.returncode == 0, (cmd, h.stderr)
    # `lamplighter gpusim` is the lab's: a checkout has it, the wheel does not, and --help does not offer it.
    assert "gpusim" not in cli("--help").stdout.split("positional arguments:")[1].split("options:")[0]
    sim = cli("healthcheck", "--gpusim-root", str(home), "--node", "n1")
    assert sim.returncode != 0 and "not in the wheel" in sim.stderr, sim.stdout + sim.stderr
