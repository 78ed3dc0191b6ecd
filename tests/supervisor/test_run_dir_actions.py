"""Action lines into a job's run directory: written as the job's user, never through a link, never as root.

The tests run as root (CI): they write as an ordinary uid, and check the owner the kernel gives the file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lamplighter.rundir.actions import ACTIONS_FILE, RunDirActions, RunDirWriteError, append_as

UID = GID = 4242  # a uid with no passwd entry: append_as needs none (RunDirActions asks passwd for the group)


@pytest.fixture
def base() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("writing as another uid needs root (CI runs as root)")
    d = Path(tempfile.mkdtemp(prefix="ll-rundir-"))  # not under pytest's root-only folder: the uid must reach it
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_dir(base: Path, owner: int = UID) -> Path:
    d = base / "run"
    d.mkdir()
    os.chown(d, owner, owner)
    return d


def test_a_line_is_appended_as_the_jobs_user(base: Path) -> None:
    d = run_dir(base)
    append_as(UID, GID, str(d), '{"action":"requeue"}')
    append_as(UID, GID, str(d), '{"action":"drain"}\n')
    path = d / ACTIONS_FILE
    assert path.read_text() == '{"action":"requeue"}\n{"action":"drain"}\n'
    assert (path.stat().st_uid, path.stat().st_gid) == (UID, GID)  # the kernel: the user wrote it, not root


def test_a_link_in_its_place_is_not_followed(base: Path) -> None:
    d = run_dir(base)
    target = base / "root-owned" / "completed"  # where the old root writer would have created a file
    target.parent.mkdir()
    os.symlink(target, d / ACTIONS_FILE)
    with pytest.raises(RunDirWriteError, match="Too many levels of symbolic links"):
        append_as(UID, GID, str(d), "x")
    assert not target.exists()


def test_a_fifo_in_its_place_does_not_block(base: Path) -> None:
    d = run_dir(base)
    os.mkfifo(d / ACTIONS_FILE)
    os.chown(d / ACTIONS_FILE, UID, UID)
    with pytest.raises(RunDirWriteError, match=r"No such device or address|not a regular file"):
        append_as(UID, GID, str(d), "x", timeout_s=5.0)


def test_someone_elses_directory_or_file_is_refused(base: Path) -> None:
    d = run_dir(base, owner=UID + 1)
    d.chmod(0o777)  # writable by all: the kernel would let the user write; the owner check does not
    with pytest.raises(RunDirWriteError, match=f"belongs to uid {UID + 1}, not {UID}"):
        append_as(UID, GID, str(d), "x")
    assert not (d / ACTIONS_FILE).exists()
    mine = base / "mine"
    mine.mkdir()
    os.chown(mine, UID, UID)
    (mine / ACTIONS_FILE).write_text("root's\n")  # a file root left there (the old writer)
    with pytest.raises(RunDirWriteError, match=r"Permission denied|not a regular file of uid"):
        append_as(UID, GID, str(mine), "x")
    assert (mine / ACTIONS_FILE).read_text() == "root's\n"


def test_a_directory_link_is_not_followed(base: Path) -> None:
    real = run_dir(base)
    os.symlink(real, base / "link")
    with pytest.raises(RunDirWriteError, match=r"Too many levels of symbolic links|Not a directory"):
        append_as(UID, GID, str(base / "link"), "x")


def test_the_sink_writes_each_jobs_lines_as_its_owner_and_says_once_why_not(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = run_dir(base, owner=0)
    writes: list[tuple[int, int, str, str]] = []
    sink = RunDirActions({"7": str(d)}.get, {"7": 0}.get, write=lambda *a: writes.append(a))
    sink("line", ["7", "8"])  # job 8: not seen here, nothing to write
    assert writes == [(0, 0, str(d), "line")]

    def refuse(*_: object) -> None:
        raise RunDirWriteError(1, "nope")

    sink = RunDirActions({"7": str(d)}.get, {"7": 0}.get, write=refuse)
    sink("a", ["7"])
    sink("b", ["7"])
    said = [r.getMessage() for r in caplog.records if "not appending" in r.getMessage()]
    assert len(said) == 1 and "as uid 0" in said[0] and "nope" in said[0]
