"""An append-only JSONL journal that survives SIGKILL at any point.

Every record is one line, written with a single write() and fsync'd before
append() returns, so a record that append() returned for is on disk. A kill in
the middle of a write leaves at most one torn last line; opening the journal
cuts it off (it was never acknowledged) before anything new is appended, so a
torn line can never end up in the middle of the file. A bad line anywhere but
the end means the file was damaged by something else: that is an error naming
the file and line.

Records carry a sequence number "seq" that increases by one per record; the
snapshot (state_store.py) remembers the last seq it contains, so replaying a
journal that a crash left behind after a compaction applies nothing twice.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class JournalError(Exception):
    """The journal cannot be read or written; the message names the file (and line)."""


@dataclass(frozen=True)
class JournalContents:
    records: list[dict[str, Any]]
    valid_bytes: int  # length of the intact prefix
    torn_bytes: int  # bytes of an unfinished last line (0 if none)


def read_journal(path: Path) -> JournalContents:
    """The journal's intact records; a torn last line is reported, not returned."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return JournalContents([], 0, 0)
    except OSError as e:
        raise JournalError(f"journal {path}: cannot read: {e}") from e
    records: list[dict[str, Any]] = []
    pos = 0
    lineno = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        lineno += 1
        if end < 0:
            # No newline: the write was cut short. Never acknowledged, so drop it.
            return JournalContents(records, pos, len(data) - pos)
        line = data[pos:end]
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            raise JournalError(f"journal {path}: line {lineno} is damaged ({e}): {line[:80]!r}") from e
        records.append(rec)
        pos = end + 1
    return JournalContents(records, pos, 0)


class Journal:
    """Appends fsync'd JSON lines to one file; open() recovers it first."""

    def __init__(self, path: Path, fd: int, next_seq: int, size: int) -> None:
        self.path = path
        self._fd = fd
        self.next_seq = next_seq
        self._size = size  # bytes of acknowledged records: where to cut back to if a write fails

    @classmethod
    def open(cls, path: Path, first_seq: int = 1) -> tuple[Journal, list[dict[str, Any]]]:
        """Open for appending, cutting off a torn tail; returns the journal and its records.

        first_seq is the seq the next record gets when the journal is empty
        (the snapshot's last seq + 1).
        """
        contents = read_journal(path)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640)
        except OSError as e:
            raise JournalError(f"journal {path}: cannot open: {e}") from e
        try:
            if contents.torn_bytes:
                os.ftruncate(fd, contents.valid_bytes)
                os.fsync(fd)
        except OSError as e:
            os.close(fd)
            raise JournalError(f"journal {path}: cannot cut torn tail: {e}") from e
        seqs = [r["seq"] for r in contents.records if isinstance(r.get("seq"), int)]
        next_seq = max([first_seq - 1, *seqs]) + 1
        return cls(path, fd, next_seq, contents.valid_bytes), contents.records

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Write one record (seq added) durably; returns it as written."""
        rec = {"seq": self.next_seq, **record}
        line = (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode()
        try:
            written = os.write(self._fd, line)
            if written != len(line):
                raise OSError(f"short write: {written} of {len(line)} bytes")
            os.fsync(self._fd)
        except OSError as e:
            self._cut_back()
            raise JournalError(f"journal {self.path}: cannot append record seq {self.next_seq}: {e}") from e
        self.next_seq += 1
        self._size += len(line)
        return rec

    def _cut_back(self) -> None:
        # A half-written line must not stay in front of the next record.
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            pass

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
