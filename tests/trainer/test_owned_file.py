"""The one bounded reader of files other users write: what it refuses, and that a refusal never blocks."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from lamplighter.rundir.owned_file import OwnedFileError, read_owned, read_owned_tail

ME = os.getuid()


def test_a_small_regular_file_of_its_owner_is_read_whole(tmp_path: Path) -> None:
    f = tmp_path / "job.json"
    f.write_bytes(b"{}\n")
    assert read_owned(f, owner=ME, max_bytes=3) == b"{}\n"
    with pytest.raises(OwnedFileError, match="holds 3 bytes, more than the 2 read"):
        read_owned(f, owner=ME, max_bytes=2)
    with pytest.raises(OwnedFileError, match="no such file") as e:
        read_owned(tmp_path / "absent", owner=ME, max_bytes=10)
    assert e.value.why == "no such file"


def test_a_link_a_fifo_a_device_or_a_folder_in_its_place_is_refused_without_blocking(tmp_path: Path) -> None:
    target = tmp_path / "real"
    target.write_text("1\n")
    (tmp_path / "link").symlink_to(target)
    os.mkfifo(tmp_path / "fifo")  # no writer: an open for reading that waited for one would hang the test
    (tmp_path / "zero").symlink_to("/dev/zero")
    cases = {
        tmp_path / "link": "is a symbolic link|cannot open",
        tmp_path / "fifo": "is not a regular file",
        tmp_path / "zero": "is a symbolic link|cannot open",
        Path("/dev/zero"): "is not a regular file",
        tmp_path: "is not a regular file",
    }
    for path, why in cases.items():
        with pytest.raises(OwnedFileError, match=why):
            read_owned(path, owner=None, max_bytes=1 << 20)


def test_another_users_file_is_refused_and_its_content_never_echoed(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to another uid")
    other = pwd.getpwnam("nobody").pw_uid
    f = tmp_path / "completed"
    f.write_text("secret-token\n")
    os.chown(f, other, other)
    with pytest.raises(OwnedFileError) as e:
        read_owned(f, owner=ME, max_bytes=100)
    assert f"belongs to uid {other}, not to uid {ME}: ignored" in str(e.value) and "secret" not in str(e.value)
    assert read_owned(f, owner=other, max_bytes=100) == b"secret-token\n"


def test_a_sparse_giant_is_refused_from_its_size_and_a_logs_tail_is_its_last_bytes(tmp_path: Path) -> None:
    giant = tmp_path / "steps.jsonl"
    with open(giant, "wb") as f:
        f.truncate(1 << 40)  # 1 TiB of holes: reading it whole would never end
    with pytest.raises(OwnedFileError, match="more than the 1048576 read"):
        read_owned(giant, owner=ME, max_bytes=1 << 20)
    log = tmp_path / "log"
    log.write_bytes(b"a\nb\nc\n")
    assert read_owned_tail(log, owner=ME, max_bytes=4) == (b"b\nc\n", False)
    assert read_owned_tail(log, owner=ME, max_bytes=100) == (b"a\nb\nc\n", True)
