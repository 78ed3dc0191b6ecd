"""The lab's torchtitan training environment: a venv of its own with torchtitan 0.3 from PyPI, and its assets.

    python -m lamplighter.lab.torchtitan_env [--dir build/torchtitan-env]

torch is pinned and installed first, as the project's own venv does: torchtitan 0.3.0 declares no torch
requirement, so it leaves torch 2.13.0 (the CPU wheel) in place, and any other torch requirement would
download a multi-GB CUDA build. The data and the tokenizer are generated (torchtitan_cpu/make_assets.py;
the wheel ships neither, and torchtitan's own test data is C4 text under a second licence). A stamp file
records what was installed; a second call with the same packages does nothing. lamplighter itself is not
installed there: its torchtitan launch reaches the trainers through PYTHONPATH, as on a cluster.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

TORCH = "torch==2.13.0"
# Measured together on this machine (../shared/reviews/real-trainers-2026-11-26.md): the versions of record.
PACKAGES = (
    "torchtitan==0.3.0",
    "torchft-nightly==2026.10.26",
    "torchdata==0.11.0",
    "datasets==4.7.0",
    "tokenizers==0.23.3",
    "tyro==1.0.17",
)
CPU_DIR = Path(__file__).resolve().parent / "torchtitan_cpu"
DEFAULT_DIR = Path("build/torchtitan-env")


@dataclass(frozen=True)
class TitanEnv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    @property
    def assets(self) -> Path:
        return self.root / "assets"

    def trainer_env(self) -> dict[str, str]:
        """What a job's trainer.env needs to run the lab's CPU torchtitan."""
        return {
            "PYTHONPATH": str(CPU_DIR),
            "TT_ASSETS": str(self.assets / "tokenizer"),
            "TT_DATA": str(self.assets / "data"),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "WANDB_MODE": "disabled",
        }


def _pip(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"torchtitan env: `{' '.join(cmd)}` failed ({done.returncode}):\n{tail}")


def installed_torch(python: Path) -> str:
    out = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return out.stdout.strip()


def ensure(root: Path = DEFAULT_DIR, say: object = print) -> TitanEnv:
    """The environment under `root`, built if missing or built with other packages."""
    env = TitanEnv(root.resolve())
    env.root.mkdir(parents=True, exist_ok=True)
    # One builder at a time: test workers side by side (pytest-xdist) each ask for it.
    with open(env.root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_locked(env, say)


def _ensure_locked(env: TitanEnv, say: object) -> TitanEnv:
    stamp = env.root / "installed.json"
    want = {"torch": TORCH, "packages": list(PACKAGES)}
    have = json.loads(stamp.read_text()) if stamp.exists() else None
    if have != want or not env.python.exists():
        say(f"torchtitan env: building {env.root} ({TORCH}, then {', '.join(PACKAGES)}) ...")  # type: ignore[operator]
        venv.EnvBuilder(with_pip=True, clear=True).create(env.root / "venv")
        _pip(env.python, TORCH)
        _pip(env.python, *PACKAGES)
        torch = installed_torch(env.python)
        if not torch.startswith("2.13.0"):
            raise RuntimeError(f"torchtitan env: torch is {torch!r} after installing torchtitan, not 2.13.0")
        stamp.write_text(json.dumps(want))
    if not (env.assets / "tokenizer" / "tokenizer.json").exists():
        subprocess.run([str(env.python), str(CPU_DIR / "make_assets.py"), str(env.assets)], check=True)
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lamplighter.lab.torchtitan_env", description=__doc__)
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = ap.parse_args(argv)
    env = ensure(args.dir)
    print(f"torchtitan env ready: {env.python} (torch {installed_torch(env.python)}), assets in {env.assets}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
