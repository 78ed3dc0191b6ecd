"""Moving a group's job: requeue it, keep it off the failed node, and start it at once.

Why ExcNodeList: a job that ended on a node cannot start there again for
cred_expire seconds (its credential is revoked there; measured: it is started
and killed at once, "Job credential revoked", and does not come back). Slurm
protects against that with BeginTime = now + cred_expire + 1 (121 s by
default). Keeping the requeued job off the node it failed on lets it start
now elsewhere (measured 0.9 s). When no other node could take it now (the
job's own --exclude and fully allocated nodes do not count), the StartTime is
left to Slurm: the job starts when a node frees or once its own node's
credential has expired, instead of being held off the one node it could soon use.

The exclusion is transient: each requeue excludes the job's own `--exclude`
(read from its batch script) plus the node it just failed on, not every node it
ever failed on. A node that is really broken is drained or DOWN and Slurm keeps
jobs off it anyway; accumulating healthy nodes would leave a job that failed on
every node pending forever.
"""

from __future__ import annotations

import math
import re
from typing import Protocol

from lamplighter.slurm.actions import SlurmApi, check_job_id, check_node_name, poll_job
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.parsers import NodeInfo
from lamplighter.slurm.run import SlurmCli, SlurmError

SETTLE_TIMEOUT_S = 20.0
# The settle polls back off to this, not poll_job's 1 s: a requeued job turns PENDING a moment after its
# COMPLETING, and every second lost there is a second the group is not back (measured: 0.95 s of 4.6).
SETTLE_POLL_MAX_S = 0.25
ALREADY = "already requeued by another"


class JobUpdater(Protocol):
    def update_job(self, job_id: int, settings: dict[str, str]) -> None: ...

    def batch_script(self, job_id: int) -> str: ...


class ScontrolJobUpdate:
    """`scontrol update jobid=J Key=Value...`: every value its own argv element."""

    def __init__(self, cli: SlurmCli) -> None:
        self.cli = cli

    def update_job(self, job_id: int, settings: dict[str, str]) -> None:
        self.cli.run("scontrol", "update", f"jobid={check_job_id(job_id)}", *(f"{k}={v}" for k, v in settings.items()))

    def batch_script(self, job_id: int) -> str:
        return self.cli.run("scontrol", "write", "batch_script", str(check_job_id(job_id)), "-")


_EXCLUDE = re.compile(r"^#SBATCH\s+(?:--exclude(?:=|\s+)|-x\s*)[\"']?([^\s\"']+)", re.MULTILINE)


def script_exclusions(script: str) -> list[str]:
    """The nodes a batch script excludes itself (#SBATCH --exclude / -x; the last one wins, as in sbatch)."""
    found = _EXCLUDE.findall(script)
    return expand(found[-1]) if found else []


def expand(hostlist: str | None) -> list[str]:
    return expand_hostlist(hostlist)


def start_time_value(delay_s: float) -> str:
    return "now" if delay_s <= 0 else f"now+{math.ceil(delay_s)}"


def requeue_job(api: SlurmApi, job_id: int, attempt: int | None = None, timeout: float = SETTLE_TIMEOUT_S) -> str:
    """Requeue unless it already is; returns what was found/done. Waits out COMPLETING (requeue refuses it).

    `attempt` is the run that failed (Slurm's restart count as its trainers saw it). Every node
    of a multi-node group may see the same failure (a hang through the Lighthouse, a peer's
    death), so each may ask: a restart count above the attempt means the job was requeued
    already, and requeueing it again would kill the replacement.
    """
    info = poll_job(
        api, job_id, lambda j: j.state != "COMPLETING", timeout, "done completing", max_interval=SETTLE_POLL_MAX_S
    )
    if attempt is not None and info.restarts > attempt:
        return f"{ALREADY} (Slurm restart count {info.restarts} > failed attempt {attempt}; now {info.state})"
    if info.state in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"):
        return f"already {info.state}"
    try:
        api.requeue(job_id)
    except SlurmError as e:
        if "pending" in e.stderr.lower():
            return "already pending"
        raise
    return f"requeued from {info.state}"


def start_elsewhere(
    api: SlurmApi,
    updater: JobUpdater | None,
    job_id: int,
    exclude: str | list[str] | None,
    delay_s: float,
    timeout: float = SETTLE_TIMEOUT_S,
    nodes_needed: int = 1,
) -> dict[str, str]:
    """Once the job is PENDING: keep it off `exclude` (its last nodes) and set its StartTime to now (+ delay)."""
    poll_job(
        api,
        job_id,
        lambda j: j.state not in ("COMPLETING", "REQUEUED"),
        timeout,
        "pending again",
        max_interval=SETTLE_POLL_MAX_S,
    )
    info = api.job(job_id)
    if info.state != "PENDING":
        return {"start": f"not pending ({info.state})"}
    settings: dict[str, str] = {}
    off = [exclude] if isinstance(exclude, str) else list(exclude or [])
    if off:
        # The job's own --exclude stays; nodes it failed on before do not pile up (see the module docstring).
        own = script_exclusions(updater.batch_script(job_id)) if updater is not None else []
        # Only nodes that could start it now count: not one it excludes itself (the head node), not one whose
        # every CPU is taken. Else the exclusion would leave it nowhere to go but a node another group holds
        # until that group ends; left to Slurm, it starts on its own node once the credential has expired.
        others = [n.name for n in api.nodes() if n.name not in off and n.name not in own and can_start_now(n)]
        if len(others) < nodes_needed:
            return {"start": f"left to Slurm: fewer than {nodes_needed} node(s) but {','.join(off)} can take it now"}
        settings["ExcNodeList"] = ",".join(dict.fromkeys([*own, *(check_node_name(n) for n in off)]))
    settings["StartTime"] = start_time_value(delay_s)
    try:
        if updater is None:
            api.start_now(job_id, timeout)
        else:
            updater.update_job(job_id, settings)
    except SlurmError as e:
        if "no longer pending" in e.stderr.lower():
            return {"start": "started meanwhile"}
        raise
    return {"start": " ".join(f"{k}={v}" for k, v in settings.items())}


def can_start_now(node: NodeInfo) -> bool:
    """Up, not drained, and not every CPU allocated (ALLOCATED: a job asking for any of it waits)."""
    return node.available and node.base != "ALLOCATED"


def updater_for(api: SlurmApi) -> JobUpdater | None:
    """scontrol update for the real Slurm; None for a fake without a command line (it gets `start_now`)."""
    cli = getattr(api, "cli", None)
    return ScontrolJobUpdate(cli) if isinstance(cli, SlurmCli) else None


def requeue_now(api: SlurmApi, job_id: int) -> dict[str, str]:
    """Requeue a job and start it at once, away from the node it just ran on (see the module docstring).

    With the real Slurm (`SlurmActions`) the exclusion and StartTime go through scontrol; a fake
    without a command line gets `start_now`.
    """
    info = api.job(job_id)
    updater = updater_for(api)
    nodes = expand(info.node_list)
    last = info.batch_host or (nodes[0] if nodes else None)
    return requeue_elsewhere(api, updater, job_id, last, start_at=0.0, now=0.0)


def requeue_elsewhere(
    api: SlurmApi,
    updater: JobUpdater | None,
    job_id: int,
    exclude: str | None,
    start_at: float,
    now: float,
    attempt: int | None = None,
) -> dict[str, str]:
    # Every node of its last allocation has revoked the job's credential, not only the one that saw the
    # failure: a multi-node group started at once on any of them is killed for good ("credential revoked").
    try:
        last = expand(api.job(job_id).node_list)
    except SlurmError:
        last = []
    done = requeue_job(api, job_id, attempt)
    if done.startswith(ALREADY):
        # Whoever requeued it places and starts it; a second placement would undo their exclusion.
        return {"requeue": done}
    off = list(dict.fromkeys([*([exclude] if exclude else []), *last]))
    return {
        "requeue": done,
        **start_elsewhere(api, updater, job_id, off or None, start_at - now, nodes_needed=max(1, len(last))),
    }
