"""Fault injection on a real Slurm cluster, and watching each fault's recovery from the outside.

Kinds (the group's node is the first node of its Slurm job):
  kill               SIGKILL the group's trainer processes (found by LAMPLIGHTER_JOB/REPLICA_ID in /proc environ)
  hang               SIGSTOP them (the node daemon's hang check must notice)
  hang-collective    the trainer's main thread blocks inside its next step while torchft's heartbeats go on
  exception          the trainer raises at its next step (the contract's inject file)
  gpu                an uncorrectable ECC error on GPU 0 of the group's node (gpusim folder <gpusim_root>/<node>)
  gpu-hang           every amdsmi call on GPU 0 of the group's node blocks (a wedged driver)
  gpu-lost           GPU 0 of the group's node falls off the bus
  kill-healer        SIGKILL the group, then SIGKILL the peer that sends its restarted attempt the state,
                     during the transfer (chaos_healer.py; needs a trainer that announces its sends)
  node-crash         crash the group's node (test cluster only)
  partition          stop the group's node's slurmd (SIGSTOP) for `partition_s` while its jobs live on,
                     then let it answer again (test cluster only): the old trainers must be fenced
  lighthouse-kill    SIGKILL the process listening on the Lighthouse's port
  supervisor-kill    SIGKILL the node daemon of the group's node (found by LAMPLIGHTER_SUPERVISOR_NODE)
  slurmctld-restart  SIGKILL the controller, start it again `controller_down_s` later (test cluster only)

Every injection is appended to `<run_dir>/chaos.jsonl` (one JSON object a
line, event "injected"), and what was then seen from outside (the group's
Slurm job requeued, running again and where, its first commit) as event
"recovered", so the report pairs injection, detection and recovery without
trusting the component under test. A group restarted inside its allocation
(slurm/injob/agent.py) is never requeued: its recovery is the agent's "started"
record in `<run_dir>/injob/g<N>.jsonl` after the injection (`in_job`, warm
or cold), then the group's first commit of a newer attempt. A watch ends with the job (job_end.py):
its record then says so ("job_ended") instead of waiting out its timeout. A fault that ends by itself (a partition
healing, the controller coming back) adds event "restored" when it does.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lamplighter.rundir.contract import RunPaths, attempt_number, json_records
from lamplighter.rundir.steplog import read_steps
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.chaos import proc_find
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.injob.events import journal_path, read_events
from lamplighter.slurm.run import SlurmError
from lamplighter.slurm.submit.job_end import JobEnd
from lamplighter.slurm.submit.submission import Submission
from lamplighter.system.procfs import ProcStat

CHAOS_FILE = "chaos.jsonl"
# Kinds after which the group's Slurm job is requeued and runs again (what Recovery watches).
GROUP_KINDS = (
    "kill",
    "hang",
    "hang-collective",
    "exception",
    "gpu",
    "gpu-hang",
    "gpu-lost",
    "kill-healer",
    "node-crash",
    "partition",
)
KINDS = (*GROUP_KINDS, "lighthouse-kill", "supervisor-kill", "slurmctld-restart")
GPU_FAULTS = {"gpu": "ecc-uncorrectable", "gpu-hang": "hang", "gpu-lost": "lost"}  # kind -> gpusim fault


class ChaosError(RuntimeError):
    """A fault could not be injected; says which and why."""


@dataclass
class ChaosTarget:
    """Where a fault lands and what the group looked like just before."""

    group: int | None
    node: str | None
    job_id: int | None
    restarts_before: int
    attempt_before: int = 0  # the group's trainer attempt when it was hit (contract.attempt_number)


class ClusterPowers(Protocol):
    """What only a test cluster can do to Slurm itself (the lab's TestCluster has these)."""

    def crash_node(self, name: str) -> None: ...

    def silence_node(self, name: str, silent: bool = True) -> int: ...

    def kill_controller(self) -> None: ...

    def start_controller(self) -> None: ...


@dataclass
class ChaosContext:
    sub: Submission
    api: SlurmApi
    gpusim_root: Path | None = None
    # node-crash, partition, slurmctld-restart: only the lab's test cluster can, so its caller brings it.
    cluster: ClusterPowers | None = None
    now: Callable[[], float] = time.time
    partition_s: float = 20.0  # a partition lasts this long: beyond SlurmdTimeout, so the node is marked down
    controller_down_s: float = 5.0
    _restores: list[threading.Thread] = field(default_factory=list)
    # kill-healer: armed watches still waiting, and the records they produced (chaos_healer.py).
    pending_healers: int = 0
    fired: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)

    @property
    def journal(self) -> Path:
        return Path(self.sub.run_dir) / CHAOS_FILE

    def lighthouse_port(self) -> int:
        return int(self.sub.address().rsplit(":", 1)[1])

    def later(self, delay_s: float, action: Callable[[], object], rec: dict[str, Any]) -> None:
        """Run `action` delay_s from now on its own thread, then journal `rec` (event "restored")."""

        def run() -> None:
            time.sleep(delay_s)
            try:
                action()
                rec["ok"] = True
            except Exception as e:  # journalled: the soak reports a restore that failed
                rec["ok"], rec["error"] = False, str(e)
            rec["t"] = self.now()
            append_record(self.journal, {"event": "restored", **rec})

        t = threading.Thread(target=run, name=f"restore-{rec.get('kind')}", daemon=True)
        t.start()
        self._restores.append(t)

    def wait_restores(self, timeout: float = 120.0) -> None:
        """Every partition healed and controller restarted that was due: before judging the end state."""
        for t in self._restores:
            t.join(timeout)

    def powers(self, kind: str) -> ClusterPowers:
        if self.cluster is None:
            raise ChaosError(f"{kind}: works on the lab's test cluster only (python -m lamplighter.lab chaos ...)")
        return self.cluster


def append_record(path: Path, rec: dict[str, Any]) -> None:
    """One line per record, one write() each (O_APPEND), so concurrent writers never interleave."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(rec, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)


def read_records(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return json_records(text)


def target_of(ctx: ChaosContext, kind: str, group: int | None) -> ChaosTarget:
    if kind == "lighthouse-kill":
        return ChaosTarget(None, None, ctx.sub.lighthouse_job_id, _restarts(ctx, ctx.sub.lighthouse_job_id))
    if kind == "slurmctld-restart":
        return ChaosTarget(None, None, None, 0)
    if group is None or group not in ctx.sub.groups:
        raise ChaosError(f"{kind}: give a replica group (the job has {sorted(ctx.sub.groups)})")
    jid = ctx.sub.groups[group]
    info = ctx.api.job(jid)
    if info.state != "RUNNING" or not info.node_list:
        raise ChaosError(f"{kind}: group {group} (job {jid}) is {info.state}, not running on a node")
    node = expand_hostlist(info.node_list)[0]
    return ChaosTarget(group, node, jid, info.restarts, latest_attempt(Path(ctx.sub.run_dir), group, info.restarts))


def latest_attempt(run_dir: Path, group: int, restarts: int) -> int:
    """The attempt the group's trainer runs as now: its in-job agent's last start in this run of its Slurm job."""
    first = attempt_number(restarts, 0)
    starts = [
        int(e.get("attempt", 0)) for e in read_events(journal_path(run_dir, group)) if e.get("event") == "started"
    ]
    return max([a for a in starts if first <= a < attempt_number(restarts + 1, 0)], default=first)


def _restarts(ctx: ChaosContext, job_id: int | None) -> int:
    if job_id is None:
        return 0
    try:
        return ctx.api.job(job_id).restarts
    except SlurmError:
        return 0


def inject(ctx: ChaosContext, kind: str, group: int | None) -> dict[str, Any]:
    """Inject one fault now; append and return its record.

    Everything that can fail (finding the processes, checking the options) happens first; the
    injection time is stamped right before the signal, so detection latencies never include it."""
    if kind not in KINDS:
        raise ChaosError(f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")
    tgt = target_of(ctx, kind, group)
    detail: dict[str, Any] = {}
    act = _prepare(ctx, kind, tgt, detail)
    t = ctx.now()
    act()
    if kind == "kill-healer":
        # Arming kills the group that will heal (a fault of its own, kind "kill"); the healer's
        # death is journalled later by the watcher (chaos_healer.py) as kind "kill-healer".
        detail["arms"] = kind
        kind = "kill"
    rec = {
        "event": "injected",
        "t": t,
        "kind": kind,
        "group": tgt.group,
        "node": tgt.node,
        "job_id": tgt.job_id,
        "restarts_before": tgt.restarts_before,
        "attempt_before": tgt.attempt_before,
        "detail": detail,
    }
    append_record(ctx.journal, rec)
    return rec


def _signal(procs: list[ProcStat], sig: signal.Signals, detail: dict[str, Any]) -> Callable[[], None]:
    def act() -> None:
        detail["pids"] = proc_find.signal_procs(procs, sig)

    return act


def _prepare(ctx: ChaosContext, kind: str, tgt: ChaosTarget, detail: dict[str, Any]) -> Callable[[], None]:
    """Check and look up what the fault needs; return the action that injects it (fills `detail`)."""
    job = ctx.sub.job
    if kind in ("kill", "hang"):
        procs = proc_find.trainer_procs(job, tgt.group or 0)
        if not procs:
            raise ChaosError(f"{kind}: no trainer process of job {job} group {tgt.group} found in /proc")
        return _signal(procs, signal.SIGKILL if kind == "kill" else signal.SIGSTOP, detail)
    if kind in ("exception", "hang-collective"):
        paths = RunPaths(Path(ctx.sub.run_dir))
        g = tgt.group or 0
        path = paths.inject_exception(g) if kind == "exception" else paths.inject_hang_collective(g)
        path.parent.mkdir(parents=True, exist_ok=True)
        detail["file"] = str(path)

        def exception() -> None:
            path.write_text("chaos\n")  # the trainer raises, or blocks inside, at its next step

        return exception
    if kind in GPU_FAULTS:
        if ctx.gpusim_root is None:
            raise ChaosError(f"{kind}: give --gpusim-root (the folder holding one gpusim state folder per node)")
        try:
            from lamplighter.gpusim.inject import inject as gpu_inject
            from lamplighter.gpusim.state import StateDir
        except ModuleNotFoundError as e:
            raise ChaosError(
                f"{kind}: simulated GPUs are the lab's, in a checkout of lamplighter, not the wheel ({e})"
            ) from e

        assert tgt.node is not None
        state = StateDir(ctx.gpusim_root / tgt.node)
        fault = GPU_FAULTS[kind]
        detail["gpu"] = 0
        detail["fault"] = fault

        def gpu() -> None:
            detail["what"] = gpu_inject(state, 0, fault)

        return gpu
    if kind == "kill-healer":
        from lamplighter.slurm.chaos.healer import arm

        return arm(ctx, tgt, detail)
    if kind == "node-crash":
        powers = ctx.powers(kind)
        node = tgt.node
        assert node is not None
        return lambda: powers.crash_node(node)
    if kind == "partition":
        powers = ctx.powers(kind)
        cut = tgt.node
        assert cut is not None
        detail["for_s"] = ctx.partition_s

        def partition() -> None:
            detail["slurmd_pid"] = powers.silence_node(cut, True)
            ctx.later(ctx.partition_s, lambda: powers.silence_node(cut, False), {"kind": kind, "node": cut})

        return partition
    if kind == "slurmctld-restart":
        powers = ctx.powers(kind)
        detail["down_s"] = ctx.controller_down_s

        def restart() -> None:
            powers.kill_controller()
            ctx.later(ctx.controller_down_s, powers.start_controller, {"kind": kind})

        return restart
    if kind == "lighthouse-kill":
        procs = lighthouse_procs(ctx)
        if not procs:
            raise ChaosError(f"lighthouse-kill: nothing listens on port {ctx.lighthouse_port()}")
        return _signal(procs, signal.SIGKILL, detail)
    assert kind == "supervisor-kill" and tgt.node is not None
    procs = proc_find.supervisor_procs(tgt.node, ctx.sub.slurm_conf)
    if not procs:
        raise ChaosError(
            f"supervisor-kill: no daemon of node {tgt.node} found "
            f"({proc_find.ENV_SUPERVISOR_NODE}={tgt.node} in its environment)"
        )
    return _signal(procs, signal.SIGKILL, detail)


def lighthouse_procs(ctx: ChaosContext) -> list[ProcStat]:
    """What listens on the job's Lighthouse port and belongs to its Lighthouse job: a lab node's network is its
    own, so another lab's job may listen on the same port number in another node's namespace."""
    procs = proc_find.listener_procs(ctx.lighthouse_port())
    lh_job = ctx.sub.lighthouse_job_id
    if lh_job is None:
        return procs
    mine = {p.pid for p in proc_find.find_by_env(lambda env: env.get("SLURM_JOB_ID") == str(lh_job))}
    return [p for p in procs if p.pid in mine]


def first_commit_after(run_dir: Path, groups: list[int], t: float, min_attempt: int = 0) -> float | None:
    paths = RunPaths(run_dir)
    times = [
        r.t for g in groups for r in read_steps(paths.steps(g)) if r.committed and r.t > t and r.attempt >= min_attempt
    ]
    return min(times) if times else None


class Recovery:
    """What was seen of one fault's recovery so far; `poll` looks once, so many faults can be watched at once.

    Group faults: t_requeued (Slurm's Restarts went up), t_running (RUNNING
    again, on which node; or, restarted inside its allocation, its in-job
    agent's start: in_job, how), t_first_commit (the group's first commit of
    the new attempt). Lighthouse: a new listener on its port, then any group's commit.
    Supervisor: a new daemon process of the node. Controller: it answers again,
    then any group's commit. Missing times stay None.
    """

    def __init__(self, ctx: ChaosContext, rec: dict[str, Any], deadline: float) -> None:
        self.ctx, self.rec, self.deadline = ctx, rec, deadline
        self.out: dict[str, Any] = {
            "event": "recovered",
            "of_t": rec["t"],
            "kind": rec["kind"],
            "group": rec["group"],
            "t_requeued": None,
            "t_running": None,
            "node_after": None,
            "t_first_commit": None,
            "restarts_after": None,
        }
        self._old_pids = set(rec["detail"].get("pids", []))

    def poll(self) -> bool:
        """Look once; True when the target committed again or the deadline passed."""
        ctx, rec, out = self.ctx, self.rec, self.out
        run_dir = Path(ctx.sub.run_dir)
        kind = rec["kind"]
        if kind in GROUP_KINDS:
            try:
                info = ctx.api.job(rec["job_id"])
            except SlurmError:
                info = None
            if out["t_running"] is None and info is not None and info.restarts == rec["restarts_before"]:
                self._in_job(run_dir, info.node_list)
            if not out.get("in_job") and info is not None and info.restarts > rec["restarts_before"]:
                out["t_requeued"] = out["t_requeued"] or ctx.now()
                out["restarts_after"] = info.restarts
                if info.state == "RUNNING" and out["t_running"] is None:
                    out["t_running"] = ctx.now()
                    out["node_after"] = expand_hostlist(info.node_list or "")[:1] or None
            if out["t_running"] is not None:
                newer = (
                    int(rec.get("attempt_before", attempt_number(rec["restarts_before"], 0))) + 1
                    if out.get("in_job")
                    else attempt_number(rec["restarts_before"] + 1, 0)
                )
                out["t_first_commit"] = first_commit_after(run_dir, [rec["group"]], out["t_running"], min_attempt=newer)
        elif kind == "lighthouse-kill":
            if out["t_running"] is None:
                now_pids = {p.pid for p in lighthouse_procs(ctx)}
                if now_pids and not now_pids & self._old_pids:
                    out["t_running"] = ctx.now()
            if out["t_running"] is not None:
                out["t_first_commit"] = first_commit_after(run_dir, list(ctx.sub.groups), out["t_running"])
        elif kind == "slurmctld-restart":
            if out["t_running"] is None:
                try:
                    ctx.api.jobs()
                    out["t_running"] = ctx.now()  # the controller answers again
                except SlurmError:
                    pass
            if out["t_running"] is not None:
                out["t_first_commit"] = first_commit_after(run_dir, list(ctx.sub.groups), out["t_running"])
        elif kind == "supervisor-kill":
            now_pids = {p.pid for p in proc_find.supervisor_procs(rec["node"], ctx.sub.slurm_conf)}
            if now_pids and not now_pids & self._old_pids:
                out["t_running"] = ctx.now()
                out["t_first_commit"] = first_commit_after(run_dir, list(ctx.sub.groups), rec["t"])
        return out["t_first_commit"] is not None or time.monotonic() >= self.deadline

    def _in_job(self, run_dir: Path, node_list: str | None) -> None:
        """The group's in-job agent started a newer attempt after the injection: a restart in the allocation."""
        before = int(self.rec.get("attempt_before", attempt_number(self.rec["restarts_before"], 0)))
        for e in read_events(journal_path(run_dir, self.rec["group"])):
            if (
                e.get("event") == "started"
                and float(e.get("t", 0)) >= self.rec["t"]
                and int(e.get("attempt", 0)) > before
            ):
                self.out.update(
                    t_running=float(e["t"]),
                    in_job=True,
                    how=e.get("how"),
                    node_after=expand_hostlist(node_list or "")[:1] or None,
                )
                return

    def finish(self, job_ended: str | None = None) -> dict[str, Any]:
        """Journal what was seen; `job_ended`: the watch stopped because the job is over (no recovery can come)."""
        if job_ended is not None:
            self.out["job_ended"] = job_ended
        append_record(self.ctx.journal, self.out)
        return self.out


def observe_recovery(ctx: ChaosContext, rec: dict[str, Any], timeout: float, poll: float = 0.2) -> dict[str, Any]:
    """Watch (bounded) until the fault's target commits again or the job is over; append and return the
    'recovered' record."""
    r = Recovery(ctx, rec, time.monotonic() + timeout)
    end = JobEnd(ctx.sub, ctx.api)
    while not r.poll():
        if end.look():
            return r.finish(job_ended=end.reason)
        time.sleep(poll)
    return r.finish()
