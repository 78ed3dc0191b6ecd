"""Tests that need a real part (Slurm, systemd-analyze) skip without it on a developer's machine,
but fail in CI (CI=true), where `make test` installs everything: a missing part must never pass."""

from __future__ import annotations

import os

import pytest

from lamplighter.slurm.testcluster import slurm_installed


def missing(part: str, why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{part} is missing in CI: {why}")
    pytest.skip(f"{part} not available: {why}")


def require_slurm() -> None:
    why = slurm_installed()
    if why:
        missing("real Slurm", str(why))
