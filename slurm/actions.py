"""What lamplighter does to Slurm: submit, requeue, start now, drain, resume, mark down, cancel, query.

`SlurmActions` (real) and `lamplighter.lab.fake_slurm.FakeSlurm` implement the same
`SlurmApi` protocol; later layers take a `SlurmApi` so their tests run on the
fake, and one shared test checks the fake against the real cluster.
Every value reaches scontrol as its own argv element: no shell anywhere.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from lamplighter.slurm.parsers import (
    JOBS_FORMAT,
    SQUEUE_FORMAT,
    JobInfo,
    NodeInfo,
    PartitionInfo,
    QueueEntry,
    all_jobs_format,
    parse_all_jobs,
    parse_sbatch_parsable,
    parse_scontrol_job,
    parse_scontrol_node,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_sdiag_time,
    parse_squeue,
    parse_squeue_jobs,
)
from lamplighter.slurm.run import SlurmCli, SlurmError

log = logging.getLogger(__name__)
_NODE_NAME = re.compile(r"[A-Za-z0-9_.\-\[\],]{1,128}")
MAX_REASON = 1000
# How a batch job that ended badly shows in squeue --states (FAILED: the script's status was not 0).
FAILED_STATES = ("FAILED", "OUT_OF_MEMORY")
# A job that ended (squeue shows it only when asked with --states, for MinJobAge); any other state is queued.
ENDED_STATES = frozenset(
    {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"}
)


def check_node_name(name: str) -> str:
    if not _NODE_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a Slurm node name (letters, digits, _ . - [ ] , ; at most 128)")
    return name


def check_reason(reason: str) -> str:
    """Reasons go to scontrol as one argv element; refuse what Slurm would mangle."""
    if not reason.strip():
        raise ValueError("a node reason must not be empty")
    if any(c in reason for c in "\n\r\x00"):
        raise ValueError(f"a node reason must be one line: {reason!r}")
    if len(reason) > MAX_REASON:
        raise ValueError(f"a node reason must be at most {MAX_REASON} characters (got {len(reason)})")
    return reason


def check_job_id(job_id: int) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"{job_id!r} is not a Slurm job id")
    return job_id


class SlurmApi(Protocol):
    """The Slurm operations lamplighter needs; real and fake implement it."""

    def submit(self, script: Path, after: int | None = None) -> int: ...
    def requeue(self, job_id: int) -> None: ...
    def start_now(self, job_id: int, timeout: float = 15.0) -> None: ...
    def cancel(self, job_id: int) -> None: ...
    def release(self, job_id: int) -> None: ...
    def drain(self, node: str, reason: str) -> None: ...
    def resume(self, node: str, comment: str | None = None) -> None: ...
    def mark_down(self, node: str, reason: str) -> None: ...
    def job(self, job_id: int) -> JobInfo: ...
    def jobs_by_id(self, job_ids: Iterable[int]) -> dict[int, JobInfo]: ...
    def node(self, name: str) -> NodeInfo: ...
    def nodes(self) -> list[NodeInfo]: ...
    def jobs(self, name_prefix: str | None = None) -> list[QueueEntry]: ...
    def jobs_on(self, node: str) -> list[QueueEntry]: ...
    def all_jobs(self, name_prefix: str) -> list[JobInfo]: ...
    def partitions(self) -> list[PartitionInfo]: ...
    def controller_time(self) -> float: ...


def poll_job(
    api: SlurmApi,
    job_id: int,
    cond: Callable[[JobInfo], bool],
    timeout: float,
    what: str,
    interval: float = 0.05,
    max_interval: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> JobInfo:
    """Poll `api.job(job_id)` until `cond` holds; raise TimeoutError naming the job and its last state.

    The interval doubles from `interval` to `max_interval`: a job that settles at once is seen at once, and
    one that does not (COMPLETING on a dead node until Slurm marks it down) costs slurmctld about one
    `scontrol show job` a second, not twenty: measured by make scale, a node crash cost 270-320 RPCs."""
    deadline = clock() + timeout
    while True:
        info = api.job(job_id)
        if cond(info):
            return info
        if clock() > deadline:
            raise TimeoutError(
                f"job {job_id} ({info.name}): not {what} after {timeout:.1f} s; "
                f"last state {info.state} (reason {info.reason}, nodes {info.node_list})"
            )
        sleep(interval)
        interval = min(max_interval, interval * 2)


class SlurmActions:
    """The real Slurm, through its command-line tools."""

    def __init__(self, cli: SlurmCli | None = None) -> None:
        self.cli = cli or SlurmCli()

    def submit(self, script: Path, after: int | None = None) -> int:
        """sbatch the script; with `after`, it may start only once job `after` has started (or was cancelled):
        Slurm's `--dependency=after:` (22.05: "after the specified jobs start or are cancelled")."""
        dependency = [] if after is None else [f"--dependency=after:{check_job_id(after)}"]
        out = self.cli.run("sbatch", "--parsable", *dependency, str(script))
        return parse_sbatch_parsable(out)

    def requeue(self, job_id: int) -> None:
        self.cli.run("scontrol", "requeue", str(check_job_id(job_id)))

    def start_now(self, job_id: int, timeout: float = 15.0) -> None:
        """Lift a requeued job's BeginTime hold.

        Only once PENDING: set while the job is still COMPLETING, Slurm
        overwrites the StartTime when it requeues.
        """
        poll_job(self, job_id, lambda j: j.state != "COMPLETING", timeout, "done completing")
        try:
            self.cli.run("scontrol", "update", f"jobid={check_job_id(job_id)}", "StartTime=now")
        except SlurmError as e:
            # Raced with the scheduler: it started meanwhile, which is what we wanted.
            if "no longer pending" in e.stderr and self.job(job_id).state in ("RUNNING", "CONFIGURING"):
                return
            raise

    def cancel(self, job_id: int) -> None:
        self.cli.run("scancel", str(check_job_id(job_id)))

    def release(self, job_id: int) -> None:
        """Lift a hold (e.g. the one Slurm puts on a job whose launch failed), so it may be scheduled."""
        self.cli.run("scontrol", "release", str(check_job_id(job_id)))

    def drain(self, node: str, reason: str) -> None:
        self._update_node(node, "state=drain", f"reason={check_reason(reason)}")

    def resume(self, node: str, comment: str | None = None) -> None:
        """Put the node back in service; `comment`: also set its Comment (lamplighter's resume mark)."""
        if comment is None:
            self._update_node(node, "state=resume")
        else:
            self._update_node(node, "state=resume", f"comment={check_reason(comment)}")

    def mark_down(self, node: str, reason: str) -> None:
        """Tell Slurm a node is dead now (its jobs are requeued) instead of waiting for SlurmdTimeout."""
        self._update_node(node, "state=down", f"reason={check_reason(reason)}")

    def job(self, job_id: int) -> JobInfo:
        return parse_scontrol_job(self.cli.run("scontrol", "show", "job", str(check_job_id(job_id))))

    def jobs_by_id(self, job_ids: Iterable[int]) -> dict[int, JobInfo]:
        """Several jobs in one call (state, owner, nodes, start time, restarts; no name): the daemon's cycle.
        Jobs Slurm no longer knows are absent. StartTime is printed in UTC (JobInfo.start_epoch)."""
        ids = sorted({check_job_id(j) for j in job_ids})
        if not ids:
            return {}
        out = self.cli.run(
            "squeue",
            "--noheader",
            "--states=all",
            f"--jobs={','.join(str(j) for j in ids)}",
            "-O",
            JOBS_FORMAT,
            env={"TZ": "UTC"},
        )
        return parse_squeue_jobs(out, ids)

    def node(self, name: str) -> NodeInfo:
        return parse_scontrol_node(self.cli.run("scontrol", "show", "node", check_node_name(name)))

    def nodes(self) -> list[NodeInfo]:
        return parse_scontrol_nodes(self.cli.run("scontrol", "show", "nodes"))

    def controller_time(self) -> float:
        """slurmctld's clock (epoch seconds), which stamps every drain's reason: drain_budget.settle waits on it."""
        return float(parse_sdiag_time(self.cli.run("sdiag")))

    def jobs(self, name_prefix: str | None = None) -> list[QueueEntry]:
        """Jobs in the queue (pending, running, completing), optionally only names with a prefix."""
        entries = parse_squeue(self.cli.run("squeue", "--noheader", "-o", SQUEUE_FORMAT))
        if name_prefix is None:
            return entries
        return [e for e in entries if e.name.startswith(name_prefix)]

    def jobs_on(self, node: str) -> list[QueueEntry]:
        """Every user's jobs holding the node now (running, completing, suspended): whose a silent node is."""
        out = self.cli.run(
            "squeue", "--noheader", "--all", "--states=R,CG,CF,S,ST", "-w", check_node_name(node), "-o", SQUEUE_FORMAT
        )
        return parse_squeue(out)

    def all_jobs(self, name_prefix: str) -> list[JobInfo]:
        """Every job Slurm remembers (queued, running, or ended within MinJobAge) whose name starts with the
        prefix, in one squeue: the head's read of the queue, the failed jobs and their records at once.
        A record squeue printed that cannot be read is left out and logged, never taken for another job."""
        mark = "\x1e" + secrets.token_hex(8)
        out = self.cli.run("squeue", "--noheader", "--states=all", "-O", all_jobs_format(mark), env={"TZ": "UTC"})
        jobs, bad = parse_all_jobs(out, mark)
        for rec in bad:
            log.warning("squeue printed a job record that cannot be read, left out: %r", rec[:200])
        return [j for j in jobs if j.name.startswith(name_prefix)]

    def partitions(self) -> list[PartitionInfo]:
        return parse_scontrol_partitions(self.cli.run("scontrol", "show", "partition"))

    def _update_node(self, node: str, *settings: str) -> None:
        self.cli.run("scontrol", "update", f"nodename={check_node_name(node)}", *settings)
