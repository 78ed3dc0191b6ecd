"""A Lighthouse job rendered before the move (supervisor/lighthouse/) still starts: its script names the old path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_old_module_path_runs_the_lighthouse_main() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    old, new = (
        subprocess.run([sys.executable, "-m", m, "--help"], capture_output=True, text=True, env=env, timeout=60)
        for m in ("lamplighter.supervisor.lighthouse_main", "lamplighter.supervisor.lighthouse.lighthouse_main")
    )
    assert (old.returncode, new.returncode) == (0, 0), old.stderr
    assert old.stdout == new.stdout and "--publish" in old.stdout
