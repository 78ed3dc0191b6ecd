"""Where benchmark numbers go: bench/results/<name>.json with the environment they were measured in."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
# Set by `python -m bench` for the whole run: every file it writes, in any process, carries the same stamp.
ENV_BENCH_RUN = "LAMPLIGHTER_BENCH_RUN"


def environment() -> dict[str, Any]:
    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5, cwd=RESULTS.parent
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": version("torch"),
        "torchft": version("torchft-nightly"),
        "commit": commit,
        "uncommitted_changes": uncommitted_changes(),  # [] when the numbers are the commit's
        "bench_run": os.environ.get(ENV_BENCH_RUN),  # the `make bench` run that wrote it, if any
    }


def uncommitted_changes() -> list[str]:
    """Tracked files that differ from HEAD, results aside (`git status --porcelain`, untracked files aside too).

    bench/results is what a run writes: `make bench`'s later parts see its earlier parts' files changed."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=RESULTS.parent,
        ).stdout
    except OSError:
        return ["(git not available)"]
    return [line[3:] for line in out.splitlines() if line.strip() and not line[3:].startswith("bench/results/")]


def spread(values: list[float]) -> dict[str, float]:
    """Median and range: the machine is shared and noisy, so single numbers are not quoted."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"name": name, "environment": environment(), **data}, indent=2) + "\n")
    os.replace(tmp, path)
    return path
