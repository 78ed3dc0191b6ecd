"""The Lighthouse job ends itself once every group job has left the queue (slurm/submit/release.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lamplighter.configs.schema import JobConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.slurm.submit.release import decide, group_jobs, wait_for_release
from lamplighter.slurm.submit.render import render_job
from lamplighter.slurm.submit.submission import GONE, SUBMISSION_FILE, UNKNOWN, Submission, job_states, save, submit_job


def job(tmp: Path) -> JobConfig:
    return JobConfig.model_validate(
        {"name": "rel", "run_dir": str(tmp / "run"), "groups": {"count": 2}, "slurm": {"head_node": "n1"}}
    )


def test_decide_waits_for_every_group_to_stay_out_of_the_queue() -> None:
    assert not decide(0, None, None, 10).release  # no record naming this Lighthouse yet
    assert not decide(0, {}, None, 10).release
    d = decide(0, {5: "COMPLETED", 6: "RUNNING"}, None, 10)
    assert not d.release and d.clear_since is None and "6 RUNNING" in d.reason
    d = decide(1, {5: "COMPLETED", 6: "FAILED"}, None, 10)
    assert not d.release and d.clear_since == 1
    # Requeued by its node daemon within the grace: PENDING again, the clock starts over.
    d = decide(5, {5: "COMPLETED", 6: "PENDING"}, d.clear_since, 10)
    assert not d.release and d.clear_since is None
    d = decide(6, {5: "COMPLETED", 6: GONE}, None, 10)
    assert not decide(15.9, {5: "COMPLETED", 6: GONE}, d.clear_since, 10).release
    assert decide(16, {5: "COMPLETED", 6: GONE}, d.clear_since, 10).release
    # Slurm not answering is not "ended".
    assert decide(0, {5: UNKNOWN}, None, 10).clear_since is None
    # The job reached its target and every group COMPLETED: no requeue can come, no grace.
    assert decide(0, {5: "COMPLETED", 6: "COMPLETED"}, None, 10, reached_target=True).release
    assert not decide(0, {5: "COMPLETED", 6: "COMPLETED"}, None, 10).release
    assert not decide(0, {5: "COMPLETED", 6: "FAILED"}, None, 10, reached_target=True).release


def test_only_a_complete_record_of_this_lighthouse_job_counts(tmp_path: Path) -> None:
    def record(lighthouse: int, groups: dict[int, int], extra: dict[str, Any]) -> None:
        save(Submission("rel", "x.yaml", str(tmp_path), None, "http://n1:1", lighthouse, groups, [], 0.0, 0, extra))

    assert group_jobs(tmp_path, 7) is None
    record(3, {0: 4, 1: 5}, {})
    assert group_jobs(tmp_path, 7) is None  # an earlier submission's record: its groups ended long ago
    record(7, {0: 8}, {"incomplete": "in progress"})
    assert group_jobs(tmp_path, 7) is None
    record(7, {0: 8, 1: 9}, {})
    assert group_jobs(tmp_path, 7) == [8, 9]
    (tmp_path / SUBMISSION_FILE).write_text("{damaged")
    assert group_jobs(tmp_path, 7) is None


class Clock:
    """Time that moves only when the waiter sleeps; `at` runs the world's events at their times."""

    def __init__(self, events: dict[float, Callable[[], None]]) -> None:
        self.t = 0.0
        self.events = dict(events)
        self.slept = 0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept += 1
        assert self.slept < 1000, "never released"
        self.t += s
        for at in sorted(e for e in self.events if e <= self.t):
            self.events.pop(at)()


def test_a_group_requeued_after_the_others_ended_keeps_the_lighthouse(tmp_path: Path) -> None:
    clock = Clock({})
    api = FakeSlurm(["n1", "n2", "n3"], clock=clock, begin_delay_s=0)
    sub = submit_job(
        job(tmp_path), api, config_path="x.yaml", probe=lambda a: None, read_address=lambda r, j: "http://n1:1"
    )
    assert sub.lighthouse_job_id == 1 and sub.groups == {0: 2, 1: 3} and sub.all_job_ids() == [2, 3, 1]
    g0, g1 = sub.groups[0], sub.groups[1]
    clock.events = {
        10: lambda: api.finish(g0),
        20: lambda: api.requeue(g1),  # its node daemon requeues it: pending, then running again
        40: api.stop_controller,  # Slurm stops answering: that is never "ended"
        60: api.start_controller,
        100: lambda: api.finish(g1),
    }
    logged: list[str] = []
    d = wait_for_release(
        Path(sub.run_dir), 1, api, grace_s=15, poll_s=1, clock=clock, sleep=clock.sleep, log=logged.append
    )
    assert d.release and d.clear_since is not None and d.clear_since >= 100 and clock.t >= 115
    assert any("confirming" in m for m in logged) and any("still queued" in m for m in logged)


def test_the_lighthouse_script_runs_the_release_helper_and_needs_no_second_job(tmp_path: Path) -> None:
    j = job(tmp_path).model_copy(update={"slurm": job(tmp_path).slurm.model_copy(update={"slurm_conf": "/a b/c"})})
    lighthouse = render_job(j, tmp_path / "out")[0].read_text()
    assert "-m lamplighter.slurm.submit.release --run-dir" in lighthouse and "--slurm-conf '/a b/c'" in lighthouse
    assert '#SBATCH --nodelist="n1"' in lighthouse and "#SBATCH --exclusive" not in lighthouse
    assert "release.sbatch" not in {p.name for p in (tmp_path / "out").iterdir()}


def test_the_release_helper_asks_slurm_once_a_poll_however_many_groups(tmp_path: Path) -> None:
    """make scale counted 0.4 slurmctld RPCs a second per group from this helper (one `scontrol show job`
    each, every 5 s): 25 a second at 64 groups, from one job."""
    clock = Clock({})
    many = job(tmp_path).model_copy(update={"groups": job(tmp_path).groups.model_copy(update={"count": 64})})
    api = FakeSlurm([f"n{i}" for i in range(1, 70)], clock=clock, begin_delay_s=0)
    sub = submit_job(many, api, config_path="x.yaml", probe=lambda a: None, read_address=lambda r, j: "http://n1:1")
    calls: list[str] = []
    for name in ("job", "jobs_by_id"):
        real = getattr(api, name)
        setattr(api, name, lambda *a, _r=real, _n=name, **k: calls.append(_n) or _r(*a, **k))
    clock.events = {12: lambda: [api.finish(j) for j in sub.groups.values()]}
    assert wait_for_release(Path(sub.run_dir), 1, api, grace_s=15, poll_s=5, clock=clock, sleep=clock.sleep).release
    assert calls == ["jobs_by_id"] * len(calls) and len(calls) == 7  # at 0, 5, ... 30: one call each
    # Long purged (MinJobAge), they are gone, not unknown: squeue knows none of them and says so.
    api._jobs.clear()
    assert set(job_states(api, sub.groups.values()).values()) == {GONE}


def test_a_finished_job_frees_its_lighthouse_a_grace_after_its_groups_not_a_poll_later(tmp_path: Path) -> None:
    """The Slurm lab's jobs held their Lighthouse job 30-60 s after every group had ended (a 30-s poll, then the
    grace confirmed at the next poll). A group that reached the target says so in the run dir (a stat, no RPC):
    polls come every FINISHING_POLL_S from then, and with every group COMPLETED there is no grace to wait."""
    from lamplighter.rundir.contract import RunPaths
    from lamplighter.slurm.submit.release import FINISHING_POLL_S

    clock = Clock({})
    api = FakeSlurm(["n1", "n2", "n3"], clock=clock, begin_delay_s=0)
    sub = submit_job(
        job(tmp_path), api, config_path="x.yaml", probe=lambda a: None, read_address=lambda r, j: "http://n1:1"
    )
    calls: list[float] = []
    real = api.jobs_by_id
    api.jobs_by_id = lambda *a, **k: calls.append(clock.t) or real(*a, **k)  # type: ignore[method-assign]
    done = RunPaths(Path(sub.run_dir)).completed()
    clock.events = {
        40.5: lambda: done.write_text("0\n"),  # group 0 reached the target...
        42.5: lambda: [api.finish(j) for j in sub.groups.values()],  # ... and both groups ended
    }
    d = wait_for_release(Path(sub.run_dir), 1, api, grace_s=15, poll_s=30, clock=clock, sleep=clock.sleep)
    assert d.release and d.clear_since is not None
    assert d.clear_since - 42.5 <= FINISHING_POLL_S + 1 and clock.t == d.clear_since
    assert calls[:2] == [0.0, 30.0]  # before the job finished: one call a poll, as before
