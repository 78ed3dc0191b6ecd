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

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lamplighter.rundir.contract import write_json_atomic

# The reader is slurm/head_table.py (`lamplighter status --watch` reads the table too); re-exported here.
from lamplighter.slurm.head_table import MAX_TABLE_BYTES, TABLE_FILE, JobTable
from lamplighter.slurm.parsers import JobInfo

__all__ = ["MAX_TABLE_BYTES", "TABLE_FILE", "JobTable", "publish", "record", "table_doc", "table_max_age_s"]

FILE_MODE = 0o644
PRIVATE_MODE = 0o600


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


def publish(folder: Path, doc: dict[str, Any], mode: int = FILE_MODE) -> None:
    write_json_atomic(folder / TABLE_FILE, doc, mode=mode)


def table_mode(slurm_config: dict[str, str]) -> int:
    """The table's mode: readable by every user (as squeue is) unless Slurm's PrivateData hides jobs, then by the
    daemons' own user alone (root, or the owner the shared folder writes as)."""
    private = {p.strip().lower() for p in slurm_config.get("PrivateData", "").split(",")}
    return PRIVATE_MODE if "jobs" in private else FILE_MODE
