"""deploy/slurm's wrappers: root's lamplighter gets the node's name, PATH and ROCm's place, nothing else.

slurmd runs them as root; nothing of the environment they were started with (LAMPLIGHTER_SET, a job's
variables, hostile values) may steer the check. The wrapper is run with /usr/local/bin/lamplighter pointed
at a recorder of its argv and environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WRAPPERS = Path(__file__).resolve().parents[2] / "deploy" / "slurm"


@pytest.mark.parametrize("name", ["lamplighter-healthcheck", "lamplighter-prolog"])
def test_only_what_the_check_needs_reaches_root(name: str, tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    fake = tmp_path / "lamplighter"
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, open({str(record)!r}, 'w'))\n"
    )
    fake.chmod(0o755)
    wrapper = tmp_path / name
    wrapper.write_text((WRAPPERS / name).read_text().replace("/usr/local/bin/lamplighter", str(fake)))
    hostile = "n1 $(touch pwned) `touch pwned` ; touch pwned"
    env = {
        "PATH": os.environ["PATH"],
        "SLURMD_NODENAME": hostile,
        "LAMPLIGHTER_SET": "mode=observe",
        "LD_PRELOAD": "/tmp/evil.so",
        "SLURM_JOB_ID": "42",
        "PYTHONPATH": "/tmp/evil",
    }
    subprocess.run(["bash", str(wrapper)], env=env, cwd=tmp_path, check=True, timeout=30)
    rec = json.loads(record.read_text())
    # (PWD, SHLVL and _ are the shell's; LC_CTYPE is Python's own locale coercion in the recorder.)
    assert set(rec["env"]) - {"PWD", "SHLVL", "_", "LC_CTYPE"} == {"PATH", "SLURMD_NODENAME", "ROCM_PATH"}
    assert rec["env"]["SLURMD_NODENAME"] == hostile and rec["env"]["ROCM_PATH"] == "/opt/rocm"
    assert rec["argv"][:1] == ["healthcheck"] and ("--prolog" in rec["argv"]) == name.endswith("prolog")
    assert not (tmp_path / "pwned").exists()
    # SLURM_CONF, when slurmd has one, is passed on (scontrol needs it to drain).
    subprocess.run(["bash", str(wrapper)], env={**env, "SLURM_CONF": "/etc/slurm x/slurm.conf"}, check=True)
    assert json.loads(record.read_text())["env"]["SLURM_CONF"] == "/etc/slurm x/slurm.conf"
