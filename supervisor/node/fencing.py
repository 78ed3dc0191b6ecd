"""Stale attempts on this node: processes of a Slurm job's earlier run that kept running.

A node whose slurmd stopped answering is marked down and its job started
elsewhere, while the processes here live on (slurmstepd does not need
slurmd). The kernel still places them in the job's cgroup; Slurm says the
job is pending, runs on other nodes, or started its current run after they
did (identity.verify calls that "stale"): two processes of one group in
one timeline is split brain. The reference trainer fences itself
(trainer/fence.py); any other process is killed here.

Slurm kills a requeued job's processes itself within a second or two when
its slurmd answers, so a job is called stale only when seen so at two checks
at least `grace_s` apart: a renewal or a requeue of our own never gets a
spurious action.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

GRACE_S = 5.0


@dataclass
class StaleWatch:
    """Remembers since when each job was seen stale here; reports it once it stayed so for GRACE_S."""

    grace_s: float = GRACE_S
    since: dict[str, float] = field(default_factory=dict)

    def judge(self, now: float, stale: Mapping[str, str]) -> list[tuple[str, str]]:
        """(job id, why) of the jobs seen stale (job id -> why, this check) for at least grace_s."""
        out = []
        for job_id, why in sorted(stale.items()):
            first = self.since.setdefault(job_id, now)
            if now - first >= self.grace_s:
                out.append((job_id, f"{why} (stale for {now - first:.1f} s)"))
        self.since = {k: v for k, v in self.since.items() if k in stale}
        return out
