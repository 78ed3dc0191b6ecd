"""What is installed beside lamplighter, for `lamplighter --version`, the daemon's build_info and bug reports.

Fast and side-effect free: versions come from the installed distributions'
metadata (importing torch or amdsmi would take seconds, or load a GPU
library), ROCm's from its install folder, Slurm's from `sinfo --version`
under a short deadline. Whatever is absent is "not installed", never an error.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

NOT_INSTALLED = "not installed"
# torchft is published as torchft and as torchft-nightly: both own the `torchft` import.
TORCHFT_DISTS = ("torchft", "torchft-nightly")
SLURM_TIMEOUT_S = 2.0


def dist_version(*names: str) -> str:
    """The version of the first of these distributions that is installed, named when it is not the first."""
    for name in names:
        try:
            v = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        return v if name == names[0] else f"{v} ({name})"
    return NOT_INSTALLED


def lamplighter_version() -> str:
    """The installed distribution's version (lamplighter/__init__.py's __version__, as pip installed it)."""
    v = dist_version("lamplighter")
    return "unknown (a checkout, not installed)" if v == NOT_INSTALLED else v


def rocm_version(env: Mapping[str, str] | None = None) -> str:
    """ROCm's version from $ROCM_PATH (default /opt/rocm): .info/version, as ROCm installs write it."""
    root = Path((env if env is not None else os.environ).get("ROCM_PATH") or "/opt/rocm")
    try:
        return (root / ".info" / "version").read_text().strip() or NOT_INSTALLED
    except OSError:
        return NOT_INSTALLED


def slurm_version(timeout: float = SLURM_TIMEOUT_S) -> str:
    """Slurm's version: `sinfo --version` (a login node), else the daemons' `-V` (sinfo needs slurm.conf to say it)."""
    said = ""
    for argv in (["sinfo", "--version"], ["slurmd", "-V"], ["slurmctld", "-V"]):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        m = re.search(r"(\d+\.\d+[\w.\-]*)", out.stdout)
        if out.returncode == 0 and m:
            return m.group(1)
        said = said or f"installed, version unknown ({argv[0]}: {(out.stderr.strip().splitlines() or ['?'])[-1]})"
    return said or NOT_INSTALLED


def versions(env: Mapping[str, str] | None = None) -> dict[str, str]:
    return {
        "lamplighter": lamplighter_version(),
        "torchft": dist_version(*TORCHFT_DISTS),
        "torch": dist_version("torch"),
        "amdsmi": dist_version("amdsmi"),
        "rocm": rocm_version(env),
        "slurm": slurm_version(),
    }


def version_text(env: Mapping[str, str] | None = None) -> str:
    v = versions(env)
    return "\n".join([f"lamplighter {v.pop('lamplighter')}", *(f"  {k:<8} {val}" for k, val in v.items())])
