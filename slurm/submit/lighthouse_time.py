"""The Lighthouse job's time limit when the job sets none: its partition's MaxTime, so it need not renew.

A Lighthouse job that renews leaves the queue's front for a moment, and on a busy partition it waits behind
other users' jobs while every group rides on torchft.quorum_retries (docs/queues.md). Its limit costs nothing
(one CPU, released when the groups are gone: slurm/submit/release.py), so `submit` gives it the partition's MaxTime
when that is longer than slurm.time. slurm.lighthouse_time, when set, is kept as written.
"""

from __future__ import annotations

from dataclasses import dataclass

from lamplighter.configs.schema import JobConfig, slurm_time_seconds
from lamplighter.slurm.parsers import PartitionInfo


@dataclass(frozen=True)
class LighthouseTime:
    time: str | None  # the Lighthouse job's limit to use; None: keep what the job says
    why: str


def asks_slurm(job: JobConfig) -> bool:
    """Whether the partitions matter: no limit of the user's, and a renewal to spare (slurm.renews has a time)."""
    return job.slurm.lighthouse_time is None and job.slurm.renews


def lighthouse_time(job: JobConfig, partitions: list[PartitionInfo]) -> LighthouseTime:
    s = job.slurm
    if s.lighthouse_time is not None:
        return LighthouseTime(None, f"slurm.lighthouse_time {s.lighthouse_time}, as set")
    if s.time_s is None or not s.renews:
        return LighthouseTime(None, f"slurm.time {s.time or 'the partition default'}: no renewal to spare it")
    name = s.lighthouse_partition or s.partition
    found = [p for p in partitions if (p.name == name if name else p.default)]
    if not found:
        return LighthouseTime(None, f"partition {name or '(default)'} not found: it renews before the groups")
    part = found[0]
    try:
        limit = slurm_time_seconds(part.max_time)
    except ValueError:
        return LighthouseTime(None, f"partition {part.name}'s MaxTime {part.max_time!r} unread: it renews")
    if limit is not None and limit <= s.time_s:
        return LighthouseTime(None, f"partition {part.name}'s MaxTime {part.max_time} is no longer: it renews")
    return LighthouseTime(
        part.max_time,
        f"partition {part.name}'s MaxTime {part.max_time}, above slurm.time {s.time}: it never renews mid-run "
        "(slurm.lighthouse_time sets another)",
    )


def with_lighthouse_time(job: JobConfig, time: str) -> JobConfig:
    return job.model_copy(update={"slurm": job.slurm.model_copy(update={"lighthouse_time": time})})
