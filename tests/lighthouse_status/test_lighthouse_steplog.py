"""The step log the supervisor writes from the Lighthouse for trainers that keep none."""

from __future__ import annotations

from pathlib import Path

from lamplighter.supervisor.lighthouse_status import LighthouseStatus, Member
from lamplighter.supervisor.lighthouse_steplog import LighthouseStepLog, read_lighthouse_steps
from lamplighter.supervisor.report import lost_steps


def status(*members: tuple[str, int, bool]) -> LighthouseStatus:
    return LighthouseStatus(
        quorum_id=1,
        next_quorum="",
        previous_quorum_id=1,
        quorum_age_s=0.1,
        members=[Member(rid, step, "m", "s", 1, rec) for rid, step, rec in members],
    )


def test_a_replaced_process_seen_late_is_not_a_rollback(tmp_path: Path) -> None:
    log = LighthouseStepLog(tmp_path / "steps.jsonl")
    log.record(1.0, status(("0:old", 58, False), ("1:a", 58, False)))
    # Group 0's new process heals and trains on; then a slow poll still shows the hung one's last quorum.
    log.record(2.0, status(("0:new", 0, True), ("1:a", 80, False)))
    log.record(3.0, status(("0:new", 81, False), ("1:a", 81, False)))
    assert log.record(4.0, status(("0:old", 59, False), ("1:a", 82, False))) == 1
    by_group = read_lighthouse_steps(tmp_path / "steps.jsonl", [0, 1])
    assert [(r.attempt, r.step) for r in by_group[0]] == [(0, 58), (1, 81)]
    assert lost_steps(by_group) == set()


def test_a_new_process_that_goes_back_is_still_a_rollback(tmp_path: Path) -> None:
    log = LighthouseStepLog(tmp_path / "steps.jsonl")
    log.record(
        1.0,
        status(
            ("0:old", 58, False),
        ),
    )
    log.record(
        2.0,
        status(
            ("0:new", 40, False),
        ),
    )
    assert lost_steps(read_lighthouse_steps(tmp_path / "steps.jsonl", [0])) == set(range(40, 59))


def test_a_restarted_recorder_keeps_the_attempts_it_wrote(tmp_path: Path) -> None:
    LighthouseStepLog(tmp_path / "steps.jsonl").record(1.0, status(("0:old", 5, False), ("0:new", 7, False)))
    again = LighthouseStepLog(tmp_path / "steps.jsonl")
    assert (
        again.record(
            2.0,
            status(
                ("0:old", 6, False),
            ),
        )
        == 0
    )
    assert (
        again.record(
            3.0,
            status(
                ("0:new", 8, False),
            ),
        )
        == 1
    )
