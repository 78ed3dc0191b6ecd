"""The head's one batched view of lamplighter's Slurm jobs, published for every node daemon.

A node daemon checks its adopted trainers against Slurm every few seconds
(fencing: a job requeued while its processes live on here is stale). Asked
by every node, that is a `squeue` per node every slow cycle: about 0.4
slurmctld RPCs a second per node, 400 at 1,000 nodes, where sites forbid
per-node polling. The head asks once for every lamplighter job and writes
the answer to the shared cluster status folder (node.yaml
cluster_status_dir); a node daemon reads it there and asks Slurm itself only
about what the table lacks (a job newer than the table, one that ended) or
when the table is missing or older than `max_age_s` (the head down, the
folder unshared).

The file is root's (the head daemon's), read bounded and only if it is a
regular file of root's; a record it holds is as good as Slurm's answer was
when the head asked, so a requeue is fenced at most one table period later.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lamplighter.slurm.parsers import JobInfo, job_from_fields
from lamplighter.trainer.contract import write_json_atomic
from lamplighter.trainer.owned_file import MIB, OwnedFileError, read_owned

TABLE_FILE = "slurm-jobs.json"  # in cluster_status_dir; no "node" key, so no node report reader takes it
MAX_TABLE_BYTES = 16 * MIB  # about 200 bytes a job
FILE_MODE = 0o644


def table_max_age_s(slurm_poll_s: float) -> float:
    """How old a table a node daemon still takes: three of the head's periods, at least 15 s."""
    return max(15.0, 3 * slurm_poll_s)


def table_doc(now: float, head: str, infos: Mapping[int, JobInfo]) -> dict[str, Any]:
    """What the head writes: when it asked Slurm, and each job's fields as squeue gave them, with its name."""
    jobs = {str(j): record(info, info.name) for j, info in sorted(infos.items())}
    return {"table": "lamplighter slurm jobs", "written_at": now, "head": head, "jobs": jobs}


def record(info: JobInfo, name: str) -> dict[str, str]:
    """A job as scontrol names its fields, which job_from_fields reads back into the same JobInfo."""
    out = {
        "JobId": str(info.job_id),
        "JobName": name,
        "JobState": info.state,
        "Restarts": str(info.restarts),
        "Requeue": "1" if info.requeue else "0",
    }
    optional = {
        "Reason": info.reason,
        "BatchHost": info.batch_host,
        "NodeList": info.node_list,
        "StartTime": info.start_time,
        "ExitCode": info.exit_code,
        "UserId": info.fields.get("UserId"),
    }
    return {**out, **{k: v for k, v in optional.items() if v is not None}}


def publish(folder: Path, doc: dict[str, Any]) -> None:
    write_json_atomic(folder / TABLE_FILE, doc, mode=FILE_MODE)


@dataclass
class JobTable:
    """A node daemon's reader of the head's table."""

    folder: Path
    max_age_s: float
    owner: int = 0  # the head daemon's uid: root
    clock: Any = time.time

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
        try:
            doc = json.loads(read_owned(self.folder / TABLE_FILE, owner=self.owner, max_bytes=MAX_TABLE_BYTES))
            age = self.clock() - float(doc["written_at"])
            jobs = doc["jobs"]
        except (OwnedFileError, OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(jobs, dict) or not -self.max_age_s < age <= self.max_age_s:
            return None  # a table from the future: a clock stepped, not trusted
        return jobs


def _info(rec: object) -> JobInfo | None:
    try:
        return job_from_fields({str(k): str(v) for k, v in rec.items()}) if isinstance(rec, dict) else None
    except ValueError:
        return None
