"""The head's published job table, read: the reader node daemons and `lamplighter status --watch` share.

The head daemon writes `<cluster_status_dir>/slurm-jobs.json` (supervisor/job_table.py:
what it asked Slurm about every lamplighter job, and when). A reader takes it
only when it is a regular file of the head's user (root), bounded in size, and
no older than `max_age_s`; a job the table lacks is asked of Slurm.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lamplighter.rundir.owned_file import MIB, OwnedFileError, read_owned
from lamplighter.slurm.parsers import JobInfo, job_from_fields

TABLE_FILE = "slurm-jobs.json"  # in cluster_status_dir; no "node" key, so no node report reader takes it
MAX_TABLE_BYTES = 16 * MIB  # about 200 bytes a job


@dataclass
class JobTable:
    """A reader of the head's table."""

    folder: Path
    max_age_s: float
    owner: int = 0  # the head daemon's uid: root
    clock: Any = time.time
    last_age_s: float | None = None  # how old the table was at the last read that found a fresh one
    # Why the last read took no table (None: it took one): a table that is there and refused (not the owner's,
    # as on a root_squash export; too old; broken) sends every node to slurmctld, which must not be silent.
    refused: str | None = None

    def lookup(self, job_ids: Iterable[int]) -> tuple[dict[int, JobInfo], set[int]] | None:
        """The asked jobs the table holds (with their names), and the ones it lacks; None when there is no
        fresh table to read (missing, unreadable, not root's, or older than max_age_s)."""
        jobs = self._fresh_jobs()
        if jobs is None:
            return None
        found: dict[int, JobInfo] = {}
        lacking: set[int] = set()
        for j in set(job_ids):
            info = _info(jobs.get(str(j)))
            if info is None or info.job_id != j:
                lacking.add(j)
            else:
                found[j] = info
        return found, lacking

    def named(self, name: str) -> list[JobInfo] | None:
        """The jobs of this Slurm name the fresh table holds; None when there is no fresh table."""
        jobs = self._fresh_jobs()
        if jobs is None:
            return None
        return [info for rec in jobs.values() if (info := _info(rec)) is not None and info.name == name]

    def _fresh_jobs(self) -> dict[str, Any] | None:
        doc = self._fresh_doc()
        return None if doc is None else doc["jobs"]

    def _fresh_doc(self) -> dict[str, Any] | None:
        path = self.folder / TABLE_FILE
        try:
            doc = json.loads(read_owned(path, owner=self.owner, max_bytes=MAX_TABLE_BYTES))
            age = self.clock() - float(doc["written_at"])
            jobs = doc["jobs"]
        except OwnedFileError as e:
            # No table (no head publishing yet) is no refusal: the daemons ask Slurm, as documented.
            self.refused = None if e.why == "no such file" else f"{path}: {e.why}"
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            self.refused = f"{path}: unreadable ({type(e).__name__})"
            return None
        if not isinstance(jobs, dict):
            self.refused = f"{path}: no job records"
            return None
        if not -self.max_age_s < age <= self.max_age_s:  # from the future: a clock stepped, not trusted
            self.refused = f"{path}: written {age:+.0f} s from now (taken within {self.max_age_s:g} s)"
            return None
        self.last_age_s, self.refused = age, None
        return doc


def _info(rec: object) -> JobInfo | None:
    try:
        return job_from_fields({str(k): str(v) for k, v in rec.items()}) if isinstance(rec, dict) else None
    except ValueError:
        return None
