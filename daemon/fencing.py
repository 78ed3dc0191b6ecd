"""Stale attempts on this node: trainers whose Slurm job was requeued or moved while they kept running.

A node whose slurmd stopped answering is marked down and its job started
elsewhere, while the trainers here live on (slurmstepd does not need slurmd).
Once slurmctld says the job was restarted since these trainers started
(Restarts above their attempt) or runs on other nodes, they are stale: two
processes of one group in one timeline is split brain. The reference trainer
fences itself (trainer/fence.py); any other trainer is killed here.

Slurm kills a requeued job's processes itself within a second or two when
its slurmd answers, so a job is called stale only when seen so at two checks
at least `grace_s` apart: a renewal or a requeue of our own never gets a
spurious action.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.parsers import JobInfo

GRACE_S = 5.0


@dataclass(frozen=True)
class Here:
    """A job with trainers on this node: the attempt they run as."""

    job_id: str
    attempt: int
    group: str


def stale_reason(node: str, here: Here, info: JobInfo) -> str | None:
    """Why the trainers of `here` are stale, or None if they are the job's current attempt on this node."""
    if info.restarts > here.attempt:
        return (
            f"{here.group} (Slurm job {here.job_id}) was restarted since its trainers here started: Slurm is at "
            f"attempt {info.restarts}, they run attempt {here.attempt} on {node}"
        )
    if info.state in ("PENDING", "REQUEUED", "REQUEUE_HOLD"):
        return f"{here.group} (Slurm job {here.job_id}) is {info.state} while its trainers run on {node}"
    if info.state == "RUNNING" and info.node_list and node not in expand_hostlist(info.node_list):
        return f"{here.group} (Slurm job {here.job_id}) runs on {info.node_list}, not {node}, where its trainers run"
    return None


@dataclass
class StaleWatch:
    """Remembers since when each (job, attempt) was seen stale; reports it once it stayed so for GRACE_S."""

    grace_s: float = GRACE_S
    since: dict[tuple[str, int], float] = field(default_factory=dict)

    def judge(self, now: float, node: str, here: list[Here], infos: Mapping[str, JobInfo]) -> list[tuple[Here, str]]:
        out = []
        seen = set()
        for h in here:
            info = infos.get(h.job_id)
            why = None if info is None else stale_reason(node, h, info)
            key = (h.job_id, h.attempt)
            if why is None:
                continue
            seen.add(key)
            first = self.since.setdefault(key, now)
            if now - first >= self.grace_s:
                out.append((h, f"{why} (stale for {now - first:.1f} s)"))
        self.since = {k: v for k, v in self.since.items() if k in seen}
        return out
