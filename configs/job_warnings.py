"""What `validate` warns about in a valid job: settings that hold, but lose weights in a fault they do not cover.

Each warning is one sentence with the values, from the job alone (pure; the caller prints them).
"""

from __future__ import annotations

from lamplighter.configs.schema import JobConfig


def job_warnings(job: JobConfig) -> list[str]:
    return _two_groups(job)


def _two_groups(job: JobConfig) -> list[str]:
    # torchft's Lighthouse forms a quorum only from more than half of the groups that heartbeat. A hung group's
    # Manager keeps heartbeating, so with two groups the other waits for a quorum that never forms, and both the
    # waiting group and the hung one are silent: lamplighter cannot tell which to stop before startup_timeout_s.
    if job.groups.count != 2:
        return []
    ft, lh = job.torchft, job.lighthouse
    return [
        f"groups.count is 2: while one group hangs with its Manager still heartbeating, torchft forms no quorum "
        f"for the other (it needs more than half of the groups that heartbeat), and the other ends after "
        f"torchft.quorum_timeout_s ({ft.quorum_timeout_s} s), losing the weights, unless the hung group ends first "
        f"(its own collective timeout plus lighthouse.heartbeat_timeout_ms, {lh.heartbeat_timeout_ms} ms, below "
        "quorum_timeout_s); use 3 or more groups to train through a hang"
    ]
