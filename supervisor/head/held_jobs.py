"""Jobs Slurm holds after a failed launch: released by the head, so a group is not left pending forever.

When a job's batch launch fails on its node (its credential revoked, the
controller restarted while the launch was under way, the node rebooting),
Slurm requeues the job and holds it: PENDING, reason "launch failed requeued
held", until someone runs `scontrol release`. Nobody would, and the group
would never come back (found by the soak's slurmctld-restart). The head
releases each such job of its prefix, at most once per `every_s`, so a job
whose launches keep failing is retried at a bounded rate (each failed launch
also counts as a restart of the job, which its restart budget bounds).
"""

from __future__ import annotations

from lamplighter.slurm.parsers import LAUNCH_FAILED_HELD, QueueEntry


def held_after_failed_launch(entry: QueueEntry) -> bool:
    reason = (entry.reason or "").replace("_", " ").strip().lower()
    return entry.state == "PENDING" and reason == LAUNCH_FAILED_HELD


def to_release(now: float, queue: list[QueueEntry], last: dict[int, float], every_s: float = 10.0) -> list[int]:
    """Job ids to release now; `last` (job id -> when released) is the caller's, read only here."""
    return [
        e.job_id for e in queue if held_after_failed_launch(e) and now - last.get(e.job_id, float("-inf")) >= every_s
    ]
