"""FakeSlurm alone: transitions with a controlled clock (the fake-vs-real test covers fidelity)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.slurm.run import SlurmError


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def script(tmp: Path, *lines: str) -> Path:
    p = tmp / "job.sbatch"
    p.write_text("\n".join(["#!/bin/bash", *lines, "exec true", ""]))
    return p


def test_begin_time_passes_without_start_now(tmp_path: Path) -> None:
    clock = Clock()
    s = FakeSlurm(["n1"], clock=clock, completing_s=1.0)
    jid = s.submit(script(tmp_path, '#SBATCH --job-name="ll-x-g0"'))
    assert s.job(jid).running and s.job(jid).node_list == "n1"
    s.requeue(jid)
    assert s.job(jid).state == "COMPLETING"
    with pytest.raises(SlurmError, match="no longer pending"):
        s.start_now(jid)
    clock.t += 1.0
    assert (s.job(jid).state, s.job(jid).reason) == ("PENDING", "BeginTime")
    clock.t += 6.0
    assert s.job(jid).running and s.job(jid).restarts == 1


def test_crash_requeues_requeue_jobs_and_fails_others(tmp_path: Path) -> None:
    clock = Clock()
    s = FakeSlurm(["n1", "n2", "n3"], clock=clock)
    a = s.submit(script(tmp_path, "#SBATCH --requeue"))
    b = s.submit(script(tmp_path, "#SBATCH --no-requeue"))
    assert (s.job(a).node_list, s.job(b).node_list) == ("n1", "n2")
    s.crash_node("n2")
    assert s.job(b).running and not s.node("n2").registered
    clock.t += 10.0
    assert s.job(b).state == "NODE_FAIL"
    assert s.node("n2").is_down and not s.node("n2").registered
    s.crash_node("n1")
    s.mark_down("n1", "watcher: node silent")
    assert s.job(a).pending and s.job(a).restarts == 1
    s.start_now(a)
    assert s.job(a).node_list == "n3"
    s.restart_node("n1")
    assert s.node("n1").available
    s.finish(a, exit_code=3)
    assert (s.job(a).state, s.job(a).exit_code) == ("FAILED", "3:0")


def test_waits_for_resources_and_nodelist(tmp_path: Path) -> None:
    s = FakeSlurm(["n1", "n2"])
    a = s.submit(script(tmp_path, "#SBATCH --nodes=2"))
    b = s.submit(script(tmp_path, '#SBATCH --nodelist="n2"'))
    assert s.job(a).node_list == "n1,n2"
    assert (s.job(b).state, s.job(b).reason) == ("PENDING", "Resources")
    s.cancel(a)
    assert s.job(b).node_list == "n2"
    with pytest.raises(ValueError):
        s.drain("n1", "two\nlines")
