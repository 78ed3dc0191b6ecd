"""The busy-queue run's accounting (bench/busy_queue.py): each time a group left, its queue wait, when it was
back and whether its peers kept committing meanwhile, from the step logs and squeue's samples. Pure."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import StepRecord, append_step


def commit(group: int, t: float, attempt: int, healed: str | None = None) -> StepRecord:
    return StepRecord(t, group, int(t), True, 2, 1, healed, 1.0, "h", attempt, 8, 0)


def test_a_kill_that_waited_in_the_queue_is_back_healed_and_an_absence_open_at_the_end_says_so(
    bench: ModuleType, tmp_path: Path
) -> None:
    from bench.busy_queue import absences

    paths = RunPaths(tmp_path)
    for t in range(0, 100):  # group 1 commits every second throughout
        append_step(paths.steps(1), commit(1, float(t), 0))
    for t in range(0, 10):  # group 0: killed at 10.5, waits in the queue 12-40, back at 45 on a new attempt
        append_step(paths.steps(0), commit(0, float(t), 0))
    append_step(paths.steps(0), commit(0, 45.0, 1, healed="peer:1"))
    for t in range(46, 90):
        append_step(paths.steps(0), commit(0, float(t), 1))
    samples = [(float(t), {"10": "PENDING" if 12 <= t < 40 else "RUNNING", "11": "RUNNING"}) for t in range(100)]

    rows = absences(tmp_path, {0: "10", 1: "11"}, samples, (0, 10.5))
    assert len(rows) == 1
    kill = rows[0]
    assert (kill["why"], kill["queue_wait_s"], kill["commits_again_after_s"]) == ("kill", 28.0, 34.5)
    assert kill["healed_from"] == "peer:1" and kill["peers_committing_throughout"] == 1
    assert kill["run_ended_first"] is False

    # Group 1 leaves after the run's last commit: no return to report, and no peer to judge.
    late = absences(tmp_path, {0: "10", 1: "11"}, samples, (1, 150.0))
    assert late[-1]["group"] == 1 and late[-1]["run_ended_first"] is True
    assert late[-1]["peers_committing_throughout"] is None
