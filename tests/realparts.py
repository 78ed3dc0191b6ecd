"""Helpers for tests on real parts: a missing part (Slurm, systemd-analyze) skips on a developer's machine
but fails in CI (CI=true), where `make test` installs everything; a bounded wait for real processes; and
systemd's side of sd_notify for a daemon under test."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from lamplighter.lab.run_end import stop_run
from lamplighter.lab.testcluster import slurm_installed
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import StepRecord, read_steps

T = TypeVar("T")


def missing(part: str, why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{part} is missing in CI: {why}")
    pytest.skip(f"{part} not available: {why}")


def require_slurm() -> None:
    why = slurm_installed()
    if why:
        missing("real Slurm", str(why))


def require_netns() -> None:
    """Root and the tools that make and enter namespaces (the test cluster's netns=True)."""
    if os.geteuid() != 0:
        missing("network namespaces", "needs root")
    absent = [p for p in ("ip", "nsenter") if shutil.which(p) is None]
    if absent:
        missing("network namespaces", f"missing {', '.join(absent)} (iproute2, util-linux)")


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


# Jobs in tests pace their steps like real ones (trainer.model.step_sleep_s): the CPU goes to the parts under test
# and to the tests that run beside them, not to a toy model's steps.
STEP_SLEEP_S = 0.2
# Jobs in tests train "until told": the test stops them (stop-at) once what it came for has happened.
FAR_STEPS = 1_000_000


def stop_when(
    run_dir: Path, groups: int, done: Callable[[list[list[StepRecord]]], bool], timeout: float = 300.0
) -> threading.Thread:
    """In the background: once `done` holds of the groups' committed steps (what the test came for is behind
    it), stop the job a few steps ahead (stop-at). For jobs a test runs in this process (`lamplighter local`),
    which it cannot stop from its own thread otherwise."""
    paths = RunPaths(run_dir)

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not done([[r for r in read_steps(paths.steps(g)) if r.committed] for g in range(groups)]):
            if time.monotonic() > deadline:
                return  # the test's own assertions say what went wrong
            time.sleep(0.2)
        stop_run(run_dir, range(groups))

    thread = threading.Thread(target=watch, name="stop-when", daemon=True)
    thread.start()
    return thread


def stop_once_all_commit_after(run_dir: Path, groups: int, after_s: float, timeout: float = 300.0) -> threading.Thread:
    """stop_when every group has committed a step `after_s` seconds past the job's first commit."""

    def committed_after(recs: list[list[StepRecord]]) -> bool:
        if not all(recs):
            return False
        t0 = min(r.t for rs in recs for r in rs)
        return all(any(r.t >= t0 + after_s for r in rs) for rs in recs)

    return stop_when(run_dir, groups, committed_after, timeout)


class NotifySocket:
    """systemd's side of sd_notify: a datagram socket (abstract namespace) that collects what it is sent."""

    def __init__(self) -> None:
        self.name = f"@lamplighter-test-{uuid.uuid4().hex}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(b"\0" + self.name[1:].encode())
        self.sock.settimeout(0.1)
        self.messages: list[list[str]] = []

    def drain(self) -> list[list[str]]:
        while True:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                return self.messages
            self.messages.append(data.decode().split("\n"))

    def count(self, line: str) -> int:
        return sum(line in m for m in self.drain())

    def message_with(self, line: str) -> list[str] | None:
        """The first message that holds `line` (READY=1 comes with its STATUS=...), or None yet."""
        return next((m for m in self.drain() if line in m), None)

    def close(self) -> None:
        self.sock.close()
