"""A restarted group's start time is read when it starts, not when the loop's turn began."""

from __future__ import annotations

import sys
from pathlib import Path

from lamplighter.configs.schema import ChaosConfig, JobConfig
from lamplighter.local.run import LocalOptions, LocalRun


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Watcher:
    def watch_trainer(self, proc: object) -> None:
        return None


def test_a_killed_ranks_last_step_never_counts_as_its_restarts_commit(tmp_path: Path) -> None:
    """Seen in CI at 1cb8cdb (test_local_foreign_trainer): the turn read the clock at t, the killed rank wrote a
    step at t + 0.01 and died, and the restart took t as its start; that step then counted as the new attempt's
    commit, gentle chaos took the group for healed and hung the job's only live peer: 23 steps lost."""
    clock = Clock(1000.0)
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    job = JobConfig(name="t", groups={"count": 2}, trainer={"command": sleep})
    opts = LocalOptions(run_dir=tmp_path / "run", report_dir=tmp_path / "report", chaos=ChaosConfig(), live=False)
    run = LocalRun(job, opts, clock=clock)
    run.watcher = Watcher()  # type: ignore[assignment]
    turn = clock()  # the turn began here
    run.tail.groups[1].last_commit_t = turn + 0.01  # the killed rank's last step, written just before it died
    clock.t = turn + 0.02  # its exit seen, the restart decided and carried out
    run._start_group(1, 1)
    try:
        gp = run.groups[1]
        assert gp is not None and gp.started_at == turn + 0.02
        assert not run.tail.committed_since(1, gp.started_at)  # not healthy until the new attempt commits
        run.tail.groups[1].last_commit_t = turn + 0.5  # the new attempt's first commit
        assert run.tail.committed_since(1, gp.started_at)
    finally:
        for g in run.groups:
            if g is not None:
                g.kill()
