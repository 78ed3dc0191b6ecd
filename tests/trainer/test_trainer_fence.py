"""Fencing: once a newer attempt of a group claimed the fence, an older process of the group cannot commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.trainer.fence import Claim, Fence, Fenced, read_claim


def test_a_newer_attempt_fences_the_old_process_at_its_next_check(tmp_path: Path) -> None:
    path = tmp_path / "fence" / "0.json"
    old = Fence(path, Claim("42", 1))
    old.claim()
    old.check()  # its own claim: not fenced
    new = Fence(path, Claim("42", 2))
    new.claim()
    with pytest.raises(
        Fenced, match=r"attempt 2 of this group \(Slurm job 42\) was started after this one \(attempt 1\)"
    ):
        old.check()
    new.check()
    # The old process never takes the fence back, even if it starts late.
    with pytest.raises(Fenced):
        Fence(path, Claim("42", 1)).claim()
    assert read_claim(path) == Claim("42", 2)


def test_another_submission_is_not_fenced_by_an_old_file(tmp_path: Path) -> None:
    path = tmp_path / "0.json"
    Fence(path, Claim("42", 7)).claim()
    fresh = Fence(path, Claim("43", 0))
    fresh.claim()
    fresh.check()
    assert read_claim(path) == Claim("43", 0)


def test_an_unreadable_fence_fences_nobody(tmp_path: Path) -> None:
    path = tmp_path / "0.json"
    f = Fence(path, Claim("", 0))
    f.check()  # no file yet
    path.write_text("{half")
    f.check()
    assert read_claim(path) is None
