"""A small in-memory Slurm with the behaviour lamplighter relies on, for fast tests of later layers.

Implements `SlurmApi`. What it models, as measured on the real 22.05 cluster
(tests/slurm/test_fake_vs_real.py runs the same scenario against both):
- a submitted job runs at once on the first available node(s) (lowest name),
  one job per node (the real test cluster may put two 1-CPU jobs on a node);
- `requeue` passes through COMPLETING to PENDING with Reason=BeginTime and
  Restarts+1; it starts again only after `start_now` (or `begin_delay_s`);
- a drained node takes no new jobs; its running jobs keep running;
- `crash_node` makes a node stop answering; `slurmd_timeout_s` later (real:
  ~10 s with SlurmdTimeout=3) it goes DOWN, and `mark_down` does that at once:
  its `--requeue` jobs are requeued (Restarts+1), `--no-requeue` ones end
  as NODE_FAIL;
- not modelled: with ReturnToService=2 a node marked down whose slurmd still
  runs comes back at its next registration (about a second later);
- `finish` ends a job as COMPLETED or FAILED.
Time comes from the `clock` given; the state only changes when it is read.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from lamplighter.slurm.actions import FAILED_STATES, check_job_id, check_node_name, check_reason
from lamplighter.slurm.parsers import LAUNCH_FAILED_HELD, JobInfo, NodeInfo, PartitionInfo, QueueEntry
from lamplighter.slurm.run import SlurmError


def stamp_of(t: float) -> str:
    """Slurm's reason stamp for epoch time `t`: `2026-11-23T10:11:12`, local time, whole seconds."""
    return datetime.fromtimestamp(int(t)).isoformat()


_SBATCH = re.compile(r"^#SBATCH\s+(--[a-z-]+)(?:=\"?([^\"]*)\"?)?\s*$")


@dataclass
class _Job:
    job_id: int
    name: str
    nodes: int
    requeue: bool
    nodelist: str | None
    state: str = "PENDING"
    reason: str | None = None
    restarts: int = 0
    on: list[str] = field(default_factory=list)
    begin: float = 0.0
    completing_until: float = 0.0
    exit_code: str = "0:0"
    held: bool = False
    command: str = ""  # the script submitted (scontrol's Command=)
    user_id: int = 0  # who submitted it
    started: float | None = None  # StartTime of its current run (epoch seconds: the fake's clock)
    after: int | None = None  # --dependency=after: starts once that job has started or was cancelled


@dataclass
class _Node:
    name: str
    base: str = "IDLE"
    drain: bool = False
    responding: bool = True
    reason: str | None = None
    reason_at: float | None = None  # the controller's clock when the reason was set: Slurm's stamp
    silent_since: float | None = None
    comment: str | None = None


class FakeSlurm:
    """In-memory Slurm; `crash_node`, `restart_node` and `finish` stand in for the world outside."""

    def __init__(
        self,
        nodes: list[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        completing_s: float = 0.0,
        begin_delay_s: float = 6.0,
        slurmd_timeout_s: float = 10.0,
    ) -> None:
        self._clock = clock
        self._nodes = {n: _Node(n) for n in (nodes or ["n1", "n2", "n3"])}
        self._jobs: dict[int, _Job] = {}
        self._next_id = 1
        self.completing_s = completing_s
        self.begin_delay_s = begin_delay_s  # real: cred_expire + 1
        self.slurmd_timeout_s = slurmd_timeout_s
        self.max_time = "UNLIMITED"  # the partition's, as scontrol prints it
        self.controller_down_calls: int | None = 0  # calls that fail as if slurmctld were down (None: all)

    # -- SlurmApi ------------------------------------------------------------

    def submit(self, script: Path, after: int | None = None, user_id: int = 0) -> int:
        """`user_id`: who submits it (the fake's stand-in for `runuser -u USER -- sbatch`); `after`: as
        `--dependency=after:JOB` (PENDING with Reason=Dependency until that job has started or was cancelled)."""
        self._controller()
        opts: dict[str, str] = {}
        for line in Path(script).read_text().splitlines():
            m = _SBATCH.match(line)
            if m:
                opts[m.group(1)] = m.group(2) or ""
        job = _Job(
            job_id=self._next_id,
            name=opts.get("--job-name", Path(script).name),
            nodes=int(opts.get("--nodes", "1")),
            requeue="--no-requeue" not in opts,
            nodelist=opts.get("--nodelist"),
            command=str(script),
            user_id=user_id,
            after=None if after is None else self._job(after).job_id,
        )
        self._next_id += 1
        self._jobs[job.job_id] = job
        self._schedule()
        return job.job_id

    def requeue(self, job_id: int) -> None:
        self._controller()
        job = self._job(job_id)
        # A FAILED batch job is requeued too, while Slurm still remembers it (MinJobAge; measured on 22.05).
        if job.state not in ("RUNNING", "PENDING", "FAILED") or not job.requeue:
            raise SlurmError(["scontrol", "requeue", str(job_id)], 1, f"Job is not requeueable for job {job_id}")
        self._requeue(job)

    def start_now(self, job_id: int, timeout: float = 15.0) -> None:
        self._controller()
        self._advance()
        job = self._job(job_id)
        if job.state != "PENDING":
            if job.state == "RUNNING":
                return
            raise SlurmError(
                ["scontrol", "update", f"jobid={job_id}", "StartTime=now"],
                1,
                f"Job is no longer pending execution for job {job_id}",
            )
        job.begin = self._clock()
        self._schedule()

    def release(self, job_id: int) -> None:
        self._controller()
        job = self._job(job_id)
        if job.state == "PENDING" and job.held:
            job.held, job.reason = False, None
            self._schedule()

    def fail_launch(self, job_id: int) -> None:
        """The world outside: the job's batch launch failed on its node (real: a revoked credential, a
        controller restarted mid-launch); Slurm requeues it and holds it until someone releases it."""
        job = self._job(job_id)
        job.state, job.on, job.held, job.reason = "PENDING", [], True, LAUNCH_FAILED_HELD
        job.restarts += 1

    def cancel(self, job_id: int) -> None:
        self._controller()
        job = self._job(job_id)
        if job.state in ("PENDING", "RUNNING", "COMPLETING"):
            # As real Slurm records it: a running job's batch shell died of scancel's SIGTERM (ExitCode=0:15).
            job.exit_code = "0:15" if job.state != "PENDING" else job.exit_code
            job.state, job.on = "CANCELLED", []

    def drain(self, node: str, reason: str) -> None:
        self._controller()
        n = self._node(node)
        n.drain, n.reason, n.reason_at = True, check_reason(reason), self._clock()

    def resume(self, node: str, comment: str | None = None) -> None:
        self._controller()
        n = self._node(node)
        n.drain = False
        if comment is not None:
            n.comment = check_reason(comment)
        if n.base == "DOWN" and n.responding:
            n.base = "IDLE"
        n.reason = None
        self._schedule()

    def set_comment(self, node: str, comment: str | None) -> None:
        """The world outside: an admin's `scontrol update nodename=NODE comment=...`."""
        self._node(node).comment = comment

    def mark_down(self, node: str, reason: str) -> None:
        self._controller()
        n = self._node(node)
        n.base, n.reason, n.reason_at = "DOWN", check_reason(reason), self._clock()
        self._fail_jobs_on(node)

    def job(self, job_id: int) -> JobInfo:
        self._controller()
        self._advance()
        j = self._job(job_id)
        return JobInfo(
            job_id=j.job_id,
            name=j.name,
            state=j.state,
            reason=j.reason,
            restarts=j.restarts,
            batch_host=j.on[0] if j.on else None,
            node_list=",".join(j.on) or None,
            start_time=None,
            requeue=j.requeue,
            exit_code=j.exit_code,
            fields={"UserId": f"u({j.user_id})", **({"Command": j.command} if j.command else {})},
        )

    def jobs_by_id(self, job_ids: Iterable[int]) -> dict[int, JobInfo]:
        """As squeue -O: no name; StartTime printed in UTC (the fake's clock is the epoch). As real squeue
        (22.05): the jobs it knows; an error only when it knows none of them."""
        self._controller()
        self._advance()
        asked = sorted(set(job_ids))
        if asked and not any(j in self._jobs for j in asked):
            argv = ["squeue", "--noheader", "--states=all", f"--jobs={','.join(map(str, asked))}"]
            raise SlurmError(argv, 1, "slurm_load_jobs error: Invalid job id specified")
        return {jid: self._squeue_record(j, full=False) for jid in asked if (j := self._jobs.get(check_job_id(jid)))}

    def all_jobs(self, name_prefix: str) -> list[JobInfo]:
        """As squeue --states=all -O: every job it remembers, with its name, reason and owner's name."""
        self._controller()
        self._advance()
        return [self._squeue_record(j, full=True) for j in self._jobs.values() if j.name.startswith(name_prefix)]

    def partitions(self) -> list[PartitionInfo]:
        """One partition over every node, as the lab's slurm.conf has (MaxTime=INFINITE): `max_time` sets it."""
        self._controller()
        return [PartitionInfo("debug", self.max_time, True)]

    def _squeue_record(self, j: _Job, full: bool) -> JobInfo:
        """jobs_by_id's fields (JOB_FIELDS), or all_jobs' (ALL_JOB_FIELDS: also the name, reason and owner)."""
        stamp = None if j.started is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(j.started))
        reason = "NonZeroExitCode" if j.state in FAILED_STATES else j.reason
        return JobInfo(
            job_id=j.job_id,
            name=j.name if full else "",
            state=j.state,
            reason=reason if full else None,
            restarts=j.restarts,
            batch_host=j.on[0] if j.on else None,
            node_list=",".join(j.on) or None,
            start_time=stamp,
            requeue=j.requeue,
            exit_code=None,
            fields={"UserId": str(j.user_id), **({"UserName": "root"} if full else {})},
        )

    def node(self, name: str) -> NodeInfo:
        self._controller()
        return self._node_info(name)

    def _node_info(self, name: str) -> NodeInfo:
        self._advance()
        n = self._node(name)
        base = n.base
        if base != "DOWN":
            base = "ALLOCATED" if any(name in j.on for j in self._jobs.values() if j.state == "RUNNING") else "IDLE"
        flags = frozenset(f for f, on in (("DRAIN", n.drain), ("NOT_RESPONDING", not n.responding)) if on)
        state = "+".join([base, *sorted(flags)])
        fields = {"Comment": n.comment} if n.comment else {}  # real scontrol prints no Comment line when unset
        # Slurm stamps a reason to the second, in the controller's local time.
        stamp = None if n.reason is None or n.reason_at is None else stamp_of(n.reason_at)
        return NodeInfo(name, state, base, flags, False, n.reason, "root" if n.reason else None, stamp, fields)

    def nodes(self) -> list[NodeInfo]:
        self._controller()
        return [self._node_info(n) for n in sorted(self._nodes)]

    def controller_time(self) -> float:
        self._controller()
        return float(int(self._clock()))  # sdiag prints whole seconds

    def jobs(self, name_prefix: str | None = None) -> list[QueueEntry]:
        self._controller()
        self._advance()
        return [
            QueueEntry(j.job_id, j.name, j.state, j.reason, ",".join(j.on) or None, "root")
            for j in self._jobs.values()
            if j.state in ("PENDING", "RUNNING", "COMPLETING")
            and (name_prefix is None or j.name.startswith(name_prefix))
        ]

    def jobs_on(self, node: str) -> list[QueueEntry]:
        return [e for e in self.jobs() if e.state != "PENDING" and node in (e.nodes or "").split(",")]

    # -- the world outside Slurm --------------------------------------------

    def stop_controller(self, for_calls: int | None = None) -> None:
        """slurmctld stops answering: every call fails (for the next `for_calls` calls, if given)."""
        self.controller_down_calls = for_calls

    def start_controller(self) -> None:
        self.controller_down_calls = 0

    def crash_node(self, name: str) -> None:
        """The node dies; after slurmd_timeout_s Slurm marks it DOWN and requeues its jobs."""
        n = self._node(name)
        n.responding, n.silent_since = False, self._clock()

    def restart_node(self, name: str) -> None:
        """The node's slurmd registers again (ReturnToService=2: a DOWN node returns)."""
        n = self._node(name)
        n.responding, n.silent_since = True, None
        if n.base == "DOWN":
            n.base, n.reason = "IDLE", None if not n.drain else n.reason
        self._schedule()

    def finish(self, job_id: int, exit_code: int = 0) -> None:
        job = self._job(job_id)
        job.state, job.on, job.exit_code = ("COMPLETED" if exit_code == 0 else "FAILED"), [], f"{exit_code}:0"
        self._schedule()

    # -- internals -----------------------------------------------------------

    def _controller(self) -> None:
        if self.controller_down_calls == 0:
            return
        if self.controller_down_calls is not None:
            self.controller_down_calls -= 1
        raise SlurmError(["scontrol"], 1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")

    def _job(self, job_id: int) -> _Job:
        j = self._jobs.get(check_job_id(job_id))
        if j is None:
            raise SlurmError(
                ["scontrol", "show", "job", str(job_id)], 1, "slurm_load_jobs error: Invalid job id specified"
            )
        return j

    def _node(self, name: str) -> _Node:
        n = self._nodes.get(check_node_name(name))
        if n is None:
            raise SlurmError(["scontrol", "show", "node", name], 1, f"Node {name} not found")
        return n

    def _requeue(self, job: _Job) -> None:
        now = self._clock()
        job.restarts += 1
        job.on = []
        job.begin = now + self.begin_delay_s
        job.completing_until = now + self.completing_s
        job.state, job.reason = ("COMPLETING", None) if self.completing_s > 0 else ("PENDING", "BeginTime")

    def _fail_jobs_on(self, node: str) -> None:
        for j in self._jobs.values():
            if j.state == "RUNNING" and node in j.on:
                if j.requeue:
                    self._requeue(j)
                else:
                    j.state, j.on, j.reason = "NODE_FAIL", [], None
        self._schedule()

    def _advance(self) -> None:
        now = self._clock()
        for n in self._nodes.values():
            if n.silent_since is not None and now - n.silent_since >= self.slurmd_timeout_s and n.base != "DOWN":
                n.base, n.reason = "DOWN", "Not responding"
                self._fail_jobs_on(n.name)
        for j in self._jobs.values():
            if j.state == "COMPLETING" and now >= j.completing_until:
                j.state, j.reason = "PENDING", "BeginTime"
        self._schedule()

    def _free(self) -> list[str]:
        busy = {n for j in self._jobs.values() if j.state in ("RUNNING", "COMPLETING") for n in j.on}
        return [
            n.name
            for n in sorted(self._nodes.values(), key=lambda x: x.name)
            if n.base != "DOWN" and n.responding and not n.drain and n.name not in busy
        ]

    def _schedule(self) -> None:
        now = self._clock()
        for j in sorted(self._jobs.values(), key=lambda x: x.job_id):
            if j.state != "PENDING" or now < j.begin or j.held:
                continue
            if j.after is not None:
                dep = self._jobs[j.after]
                if dep.started is None and dep.state != "CANCELLED":
                    j.reason = "Dependency"
                    continue
            free = self._free()
            if j.nodelist is not None:
                free = [n for n in free if n == j.nodelist]
            if len(free) >= j.nodes:
                j.state, j.reason, j.on, j.started = "RUNNING", None, free[: j.nodes], now
            else:
                j.reason = "Resources"
