"""deploy/README: as root, `lamplighter healthcheck` and `lamplighter supervise` take their settings from the
node config and their command line only; LAMPLIGHTER_SET in their environment (a job's, a login shell's,
whatever started them) changes nothing. Each command is run twice: the same override given with --set
shows that it would have changed what the command did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration  # each runs lamplighter as a process, twice

SCONTROL = """#!/bin/sh
# `scontrol show config` as 22.05 prints the line the daemon looks for; nothing else is asked here.
if [ "$1 $2" = "show config" ]; then echo "ProctrackType           = proctrack/cgroup"; exit 0; fi
echo "scontrol: not recorded: $*" >&2; exit 1
"""


def lamplighter(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lamplighter", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_healthcheck_ignores_lamplighter_set(tmp_path: Path) -> None:
    cfg = tmp_path / "node.yaml"
    cfg.write_text(yaml.safe_dump({"role": "compute", "gpu_count": 8, "state_dir": str(tmp_path / "state")}))
    # No amdsmi usable: with GPUs watched, health unknown (exit 3); with `gpus: false`, nothing to check (exit 0).
    env = {**os.environ, "ROCM_PATH": str(tmp_path / "no-rocm")}
    env.pop("LAMPLIGHTER_SET", None)
    steered = lamplighter(["healthcheck", "--config", str(cfg)], {**env, "LAMPLIGHTER_SET": "gpus=false"}, tmp_path)
    assert steered.returncode == 3 and "health unknown" in steered.stdout + steered.stderr, steered
    given = lamplighter(["healthcheck", "--config", str(cfg), "--set", "gpus=false"], env, tmp_path)
    assert given.returncode == 0 and "no GPUs watched" in given.stdout + given.stderr, given


def test_supervise_ignores_lamplighter_set(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    cfg = tmp_path / "node.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "role": "compute",
                "gpus": False,
                "state_dir": str(tmp_path / "state"),
                "status_socket": str(tmp_path / "status.sock"),
                "metrics": {"enabled": False},
            }
        )
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("LAMPLIGHTER_SET", None)
    elsewhere = tmp_path / "elsewhere"
    steered = lamplighter(
        ["supervise", "--config", str(cfg), "--once"], {**env, "LAMPLIGHTER_SET": f"state_dir={elsewhere}"}, tmp_path
    )
    assert steered.returncode == 0, steered.stderr
    assert json.loads(steered.stdout.splitlines()[-1])["cycles"] == 1
    assert (tmp_path / "state").is_dir() and not elsewhere.exists()
    given = lamplighter(["supervise", "--config", str(cfg), "--once", "--set", f"state_dir={elsewhere}"], env, tmp_path)
    assert given.returncode == 0 and elsewhere.is_dir(), given.stderr
