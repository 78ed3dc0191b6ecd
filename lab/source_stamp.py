"""The commit a lab run ran at, stamped into its result file."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


def source_stamp() -> dict[str, Any]:
    """The commit, and whether the tree had changes (a result from a dirty tree says so)."""
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str:
        try:
            out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=here)
        except OSError:
            return ""
        return out.stdout.strip() if out.returncode == 0 else ""

    return {"commit": git("rev-parse", "--short", "HEAD") or None, "dirty": bool(git("status", "--porcelain"))}
