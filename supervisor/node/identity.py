"""Does a process belong to a lamplighter group job, as the kernel and Slurm say? A pure judgement.

A process belongs to Slurm job J when (trainers.py read the first two
from the kernel, the rest is Slurm's answer):
- its cgroup is J's step (`job_J/step_S`): slurmstepd put it there;
- its real uid is J's UserId (and, on cgroup v1, the uid in the path);
- J runs, and on this node (NodeList);
- it started during J's current run: at or after J's StartTime. A process
  from before J's last requeue is a stale attempt (a node cut off from Slurm):
  fenced, never adopted;
and J is a lamplighter group job when Slurm's job name is
`<job_prefix><job>-g<N>` (configs/slurm_names.py). The attempt is Slurm's
Restarts. Nothing the process says about itself (its environment) counts.

Clocks: StartTime has whole seconds, and a process's start time is boot time
(whole seconds in /proc/stat) plus ticks, so a process of the current run can
look up to a second or two older than StartTime: START_SLACK_S. A requeued
job cannot start again before BeginTime (the requeue plus cred_expire + 1 s)
unless lamplighter lifts it (about a second later), so an earlier run's
processes are older than that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lamplighter.configs.slurm_names import parse_group_job_name
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.parsers import JobInfo
from lamplighter.supervisor.node.trainers import StepProcess

START_SLACK_S = 2.0
STALE_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED")

Kind = Literal["ours", "stale", "not_ours", "unknown", "ended"]


@dataclass(frozen=True)
class IdentityVerdict:
    kind: Kind
    reason: str
    job_name: str | None = None  # the lamplighter job (from Slurm's name), when it is one
    replica_id: int | None = None


def verify(p: StepProcess, info: JobInfo | None, name: str | None, node: str, prefix: str) -> IdentityVerdict:
    """`info`: Slurm's batched answer about the process's job (None: Slurm does not know it, or did not
    answer); `name`: the job's name (scontrol, asked once per job)."""
    j = p.cgroup.job_id
    what = f"pid {p.pid} (uid {p.uid}, Slurm job {j} step {p.cgroup.step})"
    if info is None or name is None:
        return IdentityVerdict("unknown", f"{what}: Slurm does not know job {j} (yet)")
    owner = info.user_id
    if owner is None or owner != p.uid or (p.cgroup.uid is not None and p.cgroup.uid != owner):
        return IdentityVerdict("not_ours", f"{what}: job {j} belongs to uid {owner}, the process runs as uid {p.uid}")
    parsed = parse_group_job_name(name, prefix)
    if parsed is None:
        return IdentityVerdict(
            "not_ours", f"{what}: job {j} is {name!r}, no lamplighter group job ({prefix}<job>-g<N>)"
        )
    job_name, replica_id = parsed
    if info.state in STALE_STATES:
        return IdentityVerdict("stale", f"{what}: job {j} is {info.state} while this process runs on {node}", *parsed)
    if info.state != "RUNNING":
        return IdentityVerdict("ended", f"{what}: job {j} is {info.state}", *parsed)
    nodes = expand_hostlist(info.node_list or "")
    if node not in nodes:
        return IdentityVerdict("stale", f"{what}: job {j} runs on {info.node_list}, not on {node}", *parsed)
    start = info.start_epoch
    if start is not None and p.started_at < start - START_SLACK_S:
        return IdentityVerdict(
            "stale",
            f"{what}: started {start - p.started_at:.1f} s before job {j}'s current run (StartTime "
            f"{info.start_time} UTC, restart {info.restarts}): an earlier run's process",
            *parsed,
        )
    return IdentityVerdict(
        "ours", f"{what}: {job_name} group {replica_id}, restart {info.restarts}", job_name, replica_id
    )
