"""Waiting on a job's state backs off: a job stuck COMPLETING (on a dead node) does not cost slurmctld twenty
`scontrol show job` a second for the whole wait (make scale counted 270-320 RPCs for one node crash)."""

from __future__ import annotations

import pytest

from lamplighter.slurm.actions import poll_job
from lamplighter.slurm.parsers import JobInfo, job_from_fields


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class Api:
    """`scontrol show job` as a job COMPLETING until `settles_at` on the clock, then PENDING."""

    def __init__(self, clock: Clock, settles_at: float) -> None:
        self.clock, self.settles_at, self.asked = clock, settles_at, 0

    def job(self, job_id: int) -> JobInfo:
        self.asked += 1
        state = "PENDING" if self.clock() >= self.settles_at else "COMPLETING"
        return job_from_fields({"JobId": str(job_id), "JobName": "ll-x-g0", "JobState": state})


def test_a_job_that_never_settles_is_asked_about_once_a_second_not_twenty_times() -> None:
    clock = Clock()
    api = Api(clock, settles_at=float("inf"))
    with pytest.raises(TimeoutError, match="COMPLETING"):
        poll_job(api, 7, lambda j: j.state != "COMPLETING", 20.0, "done", clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    assert api.asked <= 26  # 0.05, 0.1 ... 0.8, then 1 s: 5 + 20, against 400 at a fixed 0.05 s


def test_a_job_that_settles_quickly_is_seen_within_the_interval_it_had_reached() -> None:
    clock = Clock()
    api = Api(clock, settles_at=0.3)
    info = poll_job(api, 7, lambda j: j.state != "COMPLETING", 20.0, "done", clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]
    assert info.state == "PENDING" and clock() < 0.3 + 0.4  # seen at 0.75 s at the latest (0.05+0.1+0.2+0.4)
