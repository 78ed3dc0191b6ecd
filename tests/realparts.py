"""Helpers for tests on real parts: a missing part (Slurm, systemd-analyze) skips on a developer's machine
but fails in CI (CI=true), where `make test` installs everything; and a bounded wait for real processes."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from lamplighter.lab.testcluster import slurm_installed

T = TypeVar("T")


def missing(part: str, why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{part} is missing in CI: {why}")
    pytest.skip(f"{part} not available: {why}")


def require_slurm() -> None:
    why = slurm_installed()
    if why:
        missing("real Slurm", str(why))


def wait_for(cond: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `cond` until it returns something truthy and return that; fail naming `what` after `timeout` s.

    A bound on waiting for real processes, never a synchronisation by sleeping."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
