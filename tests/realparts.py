"""Helpers for tests on real parts: a missing part (Slurm, systemd-analyze) skips on a developer's machine
but fails in CI (CI=true), where `make test` installs everything; and a bounded wait for real processes."""

from __future__ import annotations

import os
import threading
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


def in_threads(member: Callable[[int], None], ranks: tuple[int, ...] = (0, 1), timeout: float = 60.0) -> list[str]:
    """Run member(rank) for every rank at once, one thread each (a real group's members must all be there), and
    return what any of them raised, so that a failure in a thread is reported instead of lost."""
    errors: list[str] = []

    def guarded(rank: int) -> None:
        try:
            member(rank)
        except BaseException as e:
            errors.append(f"rank {rank}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=guarded, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    errors += [
        f"rank {r}: still running after {timeout} s" for r, t in zip(ranks, threads, strict=True) if t.is_alive()
    ]
    return errors
