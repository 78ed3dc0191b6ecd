"""The names lamplighter writes into Slurm, in one place: job names and the node reason prefix.

render.py names a job's Slurm jobs with these functions, and the daemon adopts
a trainer only if its Slurm job carries the name `group_job_name` gives
(NodeConfig.job_prefix defaults to JOB_PREFIX); the head daemon lists
lamplighter jobs by the prefix. Every node lamplighter drains or marks down
has a reason starting with REASON_PREFIX: that is how `lamplighter status`,
`lamplighter nodes` and the drain rate limit tell its drains from an admin's.
"""

from __future__ import annotations

JOB_PREFIX = "ll-"
REASON_PREFIX = "lamplighter: "


def group_job_name(job: str, replica_id: int | None, prefix: str = JOB_PREFIX) -> str:
    """A replica group's Slurm job: ll-<job>-g<N>."""
    return f"{prefix}{job}-g{replica_id}"


def lighthouse_job_name(job: str, prefix: str = JOB_PREFIX) -> str:
    return f"{prefix}{job}-lighthouse"


def job_name_prefix(job: str, prefix: str = JOB_PREFIX) -> str:
    """What every Slurm job name of one lamplighter job starts with (for squeue --name filters)."""
    return f"{prefix}{job}-"


def parse_group_job_name(name: str, prefix: str = JOB_PREFIX) -> tuple[str, int] | None:
    """(job, replica id) of a group job's Slurm name `<prefix><job>-g<N>`; None for any other name."""
    if not name.startswith(prefix):
        return None
    job, sep, num = name[len(prefix) :].rpartition("-g")
    if not sep or not job or not num.isdigit():
        return None
    return job, int(num)
