from __future__ import annotations

from pathlib import Path

from lamplighter.rundir.steplog import StepRecord, append_step, read_steps


def rec(step: int, healed: str | None = None) -> StepRecord:
    return StepRecord(
        t=1.5,
        replica_id=1,
        step=step,
        committed=True,
        participants=2,
        quorum_id=7,
        healed_from=healed,
        loss=0.25,
        state_hash="ab" * 32,
        attempt=0,
        samples=16,
        first_sample=32 * step,
    )


def test_roundtrip(tmp_path: Path) -> None:
    p = tmp_path / "steps" / "1.jsonl"
    append_step(p, rec(1))
    append_step(p, rec(2, "peer:0"))
    assert read_steps(p) == [rec(1), rec(2, "peer:0")]


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_steps(tmp_path / "nope.jsonl") == []


def test_torn_last_line_skipped_and_next_append_is_clean(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    append_step(p, rec(1))
    with p.open("a") as f:
        f.write('{"t": 2.0, "replica_id": 1, "st')  # a writer killed mid-line
    assert read_steps(p) == [rec(1)]
    append_step(p, rec(2))  # the restarted writer
    assert read_steps(p) == [rec(1), rec(2)]
