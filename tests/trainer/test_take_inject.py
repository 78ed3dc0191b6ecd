"""Chaos's inject files count only as the job owner's own regular files (a shared run directory)."""

from __future__ import annotations

import os
from pathlib import Path

from lamplighter.trainer.main import take_inject


def test_only_the_owners_own_inject_file_counts(tmp_path: Path) -> None:
    mine = tmp_path / "0.exception"
    assert not take_inject(mine)
    mine.write_text("chaos\n")
    assert take_inject(mine) and not mine.exists()  # taken once: a restart runs clean
    theirs = tmp_path / "1.exception"
    theirs.write_text("chaos\n")
    if os.geteuid() == 0:
        os.chown(theirs, 4242, 4242)  # another user's, put there through a writable run directory
        assert not take_inject(theirs) and theirs.exists()
    link = tmp_path / "2.exception"
    link.symlink_to(mine)
    assert not take_inject(link) and link.is_symlink()
