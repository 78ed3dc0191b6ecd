"""The step log the supervisor writes from the Lighthouse for trainers that keep none."""

from __future__ import annotations

from pathlib import Path

from lamplighter.lighthouse.status import LighthouseStatus, Member
from lamplighter.lighthouse.steplog import LighthouseStepLog, read_lighthouse_steps
from lamplighter.report.build import lost_steps


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


def test_both_groups_started_again_from_step_one_is_a_rollback_of_every_step(tmp_path: Path) -> None:
    # What the multi-node e2e test recorded when the daemons, not told the job's end, took the groups'
    # slow exit at their target for a hang and requeued both: no peer held the state, so both trained
    # again from step 1. The recorder must write it as it happened; it is no late sight of a replaced process.
    log = LighthouseStepLog(tmp_path / "steps.jsonl")
    log.record(1.0, status(("0:a", 714, False), ("1:a", 714, False)))
    log.record(2.0, status(("0:a", 715, False), ("1:a", 715, False)))
    log.record(3.0, status(("0:b", 1, False)))
    log.record(4.0, status(("0:b", 2, False), ("1:b", 2, False)))
    by_group = read_lighthouse_steps(tmp_path / "steps.jsonl", [0, 1])
    assert [(r.attempt, r.step) for r in by_group[1]] == [(0, 714), (0, 715), (1, 2)]
    assert lost_steps(by_group) == set(range(1, 716))
