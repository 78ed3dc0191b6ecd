"""The head-node role: move lamplighter groups off a silent node before Slurm's own timeout.

Slurm marks a dead node DOWN only after SlurmdTimeout (300 s by default):
until then the group's job stays RUNNING on a node that is gone. The head
daemon probes the slurmd of the nodes that run a lamplighter job (TCP
connect to NodeAddr:Port from `scontrol show nodes`), all at once, so that a
cycle waits one probe timeout however many nodes are silent; with a shared
cluster_status_dir, only those the compute daemons report silent and a few in
turn (neighbour_watch.py), so that its cycle does not grow with the cluster. A node that refuses or
ignores the connection for `node_silence_s` is a node-wide matter, and its
probe alone (a busy accept queue, a blip on the head's own link) is no
node-wide evidence:
- when Slurm itself reports the node not responding (its own pings failed:
  `*`, NOT_RESPONDING), the head marks it DOWN with lamplighter's reason,
  which makes Slurm requeue its jobs at once (JobRequeue=1), and the
  lamplighter jobs are kept off it and started now (slurm/requeue.py);
- when Slurm says every job on the node is a lamplighter group's, and at
  least AGREEING_PROBES probes in a row found it silent, it marks it DOWN
  too: nobody else's job is there to lose, and a requeue on a node Slurm
  still believes up waits for SlurmdTimeout (300 s by default) in COMPLETING;
- otherwise it drains the node with that reason (new jobs stay away; every
  other tenant's job keeps running) and requeues only the lamplighter group
  jobs running there, each once.
All count against the same rate limit as drains. A node it drained for
silence is resumed once its slurmd answers the probe again and Slurm sees it
registered and up (as ReturnToService=2 would a DOWN node): an outage of the
head's own link costs the cluster no capacity beyond its length. The head
runs no Lighthouse: each job brings its own, as a Slurm job of its own
(slurm/submit/render.py).

The head reads Slurm (every lamplighter job slurmctld remembers, with its
record, in one squeue; and the nodes: two calls) every `slurm_poll_s`, and every cycle while a node is
silent or a failed group job awaits its grace; the probes run every cycle on
what it last read. Each read is published as the job table
(supervisor/job_table.py) the node daemons check their trainers against, so that
slurmctld's load from lamplighter does not grow with the node count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lamplighter.configs.loader import ConfigError
from lamplighter.configs.schema import NodeConfig
from lamplighter.policy.ratelimit import budget_limit, may_drain
from lamplighter.slurm.actions import ENDED_STATES, FAILED_STATES, SlurmApi
from lamplighter.slurm.drain_budget import held_out
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.parsers import JobInfo, NodeInfo, QueueEntry, queue_entry
from lamplighter.slurm.requeue import requeue_elsewhere, start_elsewhere
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.head.failed_jobs import group_of, judge, read_attempt, run_dir_of
from lamplighter.supervisor.head.held_jobs import to_release
from lamplighter.supervisor.job_table import FILE_MODE as TABLE_MODE
from lamplighter.supervisor.job_table import publish, table_doc
from lamplighter.supervisor.metrics import DaemonMetrics
from lamplighter.supervisor.neighbour_watch import publish_ring, read_suspects, sweep
from lamplighter.supervisor.node_policy import REASON_PREFIX, NodeAction
from lamplighter.system.ports import answering
from lamplighter.system.users import uid_of

log = logging.getLogger(__name__)

RETRY_S = 10.0  # a failed job whose config could not be read, or whose requeue failed: tried again after this
# A group job seen FAILED is left this long to its node's daemon, which requeues it under the job's whole policy
# (backoff, crash loop) within a poll or two; the head only steps in when nobody did.
FAILED_GRACE_S = 3.0
# A node drained for silence that answers again is watched with a read of Slurm every cycle for this long, then
# every slurm_poll_s: long enough for its slurmd to register, short for a node Slurm keeps down.
RESUME_WATCH_S = 30.0
# Failed probes in a row before a silent node holding only lamplighter groups is marked DOWN: one lost
# connection (a full accept queue, a blip on the head's link) is no node-wide evidence.
AGREEING_PROBES = 3


def silence_reason(node: str) -> str:
    """How the reason of a node the head drained for silence starts."""
    return f"{REASON_PREFIX}slurmd on {node} silent"


def decide_nodes(
    now: float,
    silent_since: dict[str, float],
    nodes: dict[str, NodeInfo],
    history: Iterable[tuple[float, str]],
    cfg: NodeConfig,
    groups_on: Mapping[str, list[tuple[int, str]]] | None = None,
    cluster_size: int | None = None,
    others_on: Mapping[str, int] | None = None,
    failed_probes: Mapping[str, int] | None = None,
) -> list[NodeAction]:
    """Pure: for nodes silent for node_silence_s and not down: mark_down when Slurm too sees the node not
    responding, or when it holds only lamplighter groups (`others_on`: node -> how many other jobs Slurm
    says hold it; absent: not known) and `failed_probes` (node -> probes in a row) reached AGREEING_PROBES;
    else drain it and requeue the lamplighter group jobs on it (`groups_on`: node -> (job id, name)); within
    the rate limit either way, of `cluster_size` nodes (default: those given). And resume the nodes drained
    for silence that answer again."""
    out: list[NodeAction] = []
    hist = list(history)
    for name, back in sorted(nodes.items()):
        # Drained or marked DOWN for silence: resumed once it answers and Slurm hears it (ReturnToService=1, the
        # default, never returns a node someone marked DOWN).
        held = (back.is_drained or back.is_down) and (back.reason or "").startswith(silence_reason(name))
        if held and name not in silent_since and back.registered:
            why = (
                f"{REASON_PREFIX}slurmd on {name} answers again and Slurm sees it up: resuming it (was: {back.reason})"
            )
            out.append(NodeAction("resume", name, why, {"type": "node-back", "node": name, "slurm_state": back.state}))
    for name, since in sorted(silent_since.items()):
        info = nodes.get(name)
        if info is None or info.is_down or now - since < cfg.node_silence_s:
            continue
        slurm_sees = info.not_responding or "NOT_RESPONDING" in info.flags
        observation = {
            "type": "node-silent",
            "node": name,
            "silent_s": round(now - since, 3),
            "slurm_state": info.state,
            "slurm_not_responding": slurm_sees,
        }
        silent = f"slurmd on {name} silent for {now - since:.1f} s (node_silence_s {cfg.node_silence_s:g})"
        ours = bool(info.reason and info.reason.startswith(REASON_PREFIX))
        probes = (failed_probes or {}).get(name, 0)
        only_groups = (others_on or {}).get(name) == 0 and bool((groups_on or {}).get(name))
        # Nobody else's job there, and enough probes agree: DOWN, as when Slurm sees it (never over another's drain).
        sole = only_groups and probes >= AGREEING_PROBES and not slurm_sees and (ours or not info.is_drained)
        if sole:
            observation = {**observation, "failed_probes": probes, "other_jobs": 0}
        if info.is_drained and not (slurm_sees or sole):
            if ours:  # drained by us already: its groups still there get moved (each once)
                out += _move_groups(now, name, silent, observation, groups_on)
            continue
        allowed, limit = may_drain(
            now, hist, cluster_size or len(nodes), cfg.max_drain_fraction, cfg.drain_window_s, node=name
        )
        what = "MARKING {} DOWN" if slurm_sees or sole else "DRAINING {}"
        if not allowed:
            out.append(NodeAction("log", name, f"NOT {what.format(name)} although its {silent}: {limit}", observation))
            continue
        observation = {**observation, "rate_limit": limit}
        if slurm_sees:
            reason = f"{REASON_PREFIX}{silent}, and Slurm reports it not responding"
            out.append(NodeAction("mark_down", name, reason, observation))
        elif sole:
            reason = (
                f"{REASON_PREFIX}{silent}, {probes} probes in a row; every job Slurm has on it is a lamplighter "
                "group's: marked down so that Slurm frees them now, not after SlurmdTimeout"
            )
            out.append(NodeAction("mark_down", name, reason, observation))
        else:
            reason = f"{REASON_PREFIX}{silent}; Slurm still sees it: drained, its lamplighter groups moved"
            out.append(NodeAction("drain", name, reason, observation))
            out += _move_groups(now, name, silent, observation, groups_on)
        hist.append((now, name))
    return out


def _move_groups(
    now: float,
    node: str,
    silent: str,
    observation: dict[str, Any],
    groups_on: Mapping[str, list[tuple[int, str]]] | None,
) -> list[NodeAction]:
    out = []
    for job_id, job_name in sorted((groups_on or {}).get(node, [])):
        ref = ((str(job_id), job_name, 0),)
        reason = f"{REASON_PREFIX}{silent}: moving {job_name} (Slurm job {job_id}) off it"
        out.append(NodeAction("requeue", str(job_id), reason, observation, start_at=now, exclude_node=node, jobs=ref))
    return out


@dataclass(frozen=True)
class Ring:
    """What the head watches, derived once per read of Slurm, not every cycle."""

    where: dict[str, tuple[str, int]]  # node running a lamplighter job, or drained for silence -> its slurmd
    silence_drained: set[str]
    jobs_on: dict[str, list[tuple[int, str]]]  # node -> the lamplighter group jobs running there (id, name)
    names: list[str]  # the watched nodes in name order: the sweep's ring, built once


def watch_ring(queue: list[QueueEntry], nodes: dict[str, NodeInfo]) -> Ring:
    """Pure: the nodes to watch (those running a lamplighter job, and those drained for silence: resumed once
    they answer), each with its slurmd's address, and the group jobs on each."""
    running = [j for j in queue if j.state == "RUNNING"]
    jobs_on: dict[str, list[tuple[int, str]]] = {}
    watched: set[str] = set()
    for j in running:
        for name in expand_hostlist(j.nodes):
            watched.add(name)
            if group_of(j.name) is not None:
                jobs_on.setdefault(name, []).append((j.job_id, j.name))
    drained = {
        n for n, i in nodes.items() if (i.is_drained or i.is_down) and (i.reason or "").startswith(silence_reason(n))
    }
    where = {
        name: (info.fields.get("NodeAddr") or name, int(info.fields.get("Port") or 6818))
        for name in sorted(watched | drained)
        if (info := nodes.get(name)) is not None
    }
    return Ring(where, drained & set(where), jobs_on, sorted(where))


@dataclass
class HeadLoop:
    cfg: NodeConfig
    api: SlurmApi
    executor: Executor
    clock: Callable[[], float]
    log_dir: Path
    silent_since: dict[str, float] = field(default_factory=dict)
    cycles: int = 0
    last_marked: list[str] = field(default_factory=list)
    moved: set[tuple[int, int]] = field(default_factory=set)  # (job id, restarts) requeued off a silent node
    released: dict[int, float] = field(default_factory=dict)  # job id -> when a launch-failure hold was lifted
    not_before: dict[tuple[int, int], float] = field(default_factory=dict)  # failed (job id, attempt) -> judge at
    metrics: DaemonMetrics | None = None
    _restarts: dict[int, int] = field(default_factory=dict)
    # Which nodes' slurmd (address, port) answer within the timeout (tests: a stand-in).
    probe: Callable[[list[tuple[str, int]], float], set[tuple[str, int]]] = answering
    _view: tuple[list[QueueEntry], dict[str, NodeInfo]] | None = None  # Slurm's queue and nodes, last read
    _ring: Ring | None = None  # what the head watches, derived from the last read
    _published_ring: dict[str, tuple[str, int]] | None = None
    _sweep_at: int = 0
    probed_last: int = 0  # nodes the last cycle probed: what its duration grows with
    answering_since: dict[str, float] = field(default_factory=dict)  # drained for silence, answering since
    failed_probes: dict[str, int] = field(default_factory=dict)  # silent node -> its probes failed in a row
    _read_at: float | None = None
    # 0600 under Slurm's PrivateData=jobs: the table must not show users what squeue hides from them
    table_mode: int = TABLE_MODE

    def start(self, now: float) -> None:
        return None  # nothing to start: each job brings its own Lighthouse (a Slurm job of its own)

    def cycle(self) -> list[dict[str, Any]]:
        now = self.clock()
        fresh = self._slurm_due(now)
        if fresh and not self._read_slurm(now):
            return []
        if self._view is None or self._ring is None:
            return []
        queue, nodes = self._view
        ring = self._ring
        for name in list(self.silent_since):
            if name not in ring.where:
                del self.silent_since[name]
                self.failed_probes.pop(name, None)
        probed = self._to_probe(now, ring)
        self.probed_last = len(probed)
        addrs = {name: ring.where[name] for name in probed}
        heard = self.probe(list(addrs.values()), min(1.0, self.cfg.node_silence_s / 2))  # all at once: one timeout
        for name, addr in addrs.items():
            if addr in heard:
                self.silent_since.pop(name, None)
                self.failed_probes.pop(name, None)
            else:
                self.silent_since.setdefault(name, now)
                self.failed_probes[name] = self.failed_probes.get(name, 0) + 1
        # Drained for silence and answering again: Slurm is read every cycle for a while, so that the node is
        # resumed as soon as Slurm has it back (its slurmd answers a little before it registers).
        self.answering_since = {
            n: self.answering_since.get(n, now) for n in ring.silence_drained if n not in self.silent_since
        }
        now = self.clock()
        if not fresh and self._resumable(ring, nodes):
            # A node back from silence is resumed on Slurm's word of now, not of up to slurm_poll_s ago: a node
            # that crashed and rebooted was still "up" to Slurm before it noticed.
            if not self._read_slurm(now) or self._view is None or self._ring is None:
                return []
            (queue, nodes), ring = self._view, self._ring
        # Only the nodes a decision can touch: the silent ones, and the ones drained for silence (to resume).
        involved = {n: nodes[n] for n in set(self.silent_since) | ring.silence_drained if n in nodes}
        groups_on = {
            node: [(j, name) for j, name in ring.jobs_on.get(node, []) if (j, self._restarts_of(j)) not in self.moved]
            for node in self.silent_since
        }
        history = self.executor.state.drain_history()
        others = self._others_on(now, involved, groups_on)
        actions = decide_nodes(
            now, self.silent_since, involved, history, self.cfg, groups_on, len(nodes), others, self.failed_probes
        )
        self.cycles += 1
        if not actions:
            return []
        results = self.executor.execute(now, actions)
        jobs = [j for j in queue if j.state == "RUNNING"]
        for a, r in zip(actions, results, strict=True):
            if a.kind == "mark_down" and r["outcome"] in ("ok", "observed"):
                self.last_marked.append(a.target)
                if r["outcome"] == "ok":
                    self._restart_jobs_of(a.target, jobs)
                for j, _ in groups_on.get(a.target, []):
                    self.moved.add((j, self._restarts_of(j)))
            if a.kind == "requeue" and a.target.isdigit():
                self.moved.add((int(a.target), self._restarts_of(int(a.target))))
        return results

    def _others_on(
        self, now: float, involved: dict[str, NodeInfo], groups_on: Mapping[str, list[tuple[int, str]]]
    ) -> dict[str, int]:
        """For each silent node a mark_down could be due on (silent long enough, probes agreeing, lamplighter
        groups there, not down): how many jobs Slurm has on it that are not lamplighter groups'. One squeue
        per such node, asked only then; a node Slurm cannot answer for is left out (drained, never DOWN)."""
        out: dict[str, int] = {}
        for name, since in self.silent_since.items():
            info = involved.get(name)
            if info is None or info.is_down or not groups_on.get(name) or now - since < self.cfg.node_silence_s:
                continue
            if self.failed_probes.get(name, 0) < AGREEING_PROBES:
                continue
            try:
                jobs = self.api.jobs_on(name)
            except SlurmError as e:
                log.warning("head: cannot list the jobs on silent node %s: %s", name, e)
                continue
            groups = {j for j, _ in self._ring.jobs_on.get(name, [])} if self._ring is not None else set()
            out[name] = sum(1 for j in jobs if j.job_id not in groups)
        return out

    def _to_probe(self, now: float, ring: Ring) -> set[str]:
        """Every watched node when the compute daemons cannot watch each other (no shared folder, or
        head_probe_sweep 0); else what they report silent, what the head holds silent or drained for silence,
        and the sweep's next few (neighbour_watch.py)."""
        if not self.cfg.cluster_status_dir or self.cfg.head_probe_sweep <= 0:
            return set(ring.where)
        reported = read_suspects(Path(self.cfg.cluster_status_dir), now, uid_of(self.cfg.cluster_status_owner))
        turn, self._sweep_at = sweep(ring.names, self._sweep_at, self.cfg.head_probe_sweep)
        own = set(self.silent_since) | ring.silence_drained | set(turn) | set(reported)
        return {n for n in own if n in ring.where}

    def _slurm_due(self, now: float) -> bool:
        """Slurm is read every slurm_poll_s, and every cycle while it is needed now: a silent node awaits a
        decision (a drain or a move may be due), or a failed group job awaits the end of its grace. A node
        already down, someone else's drain, or drained by the head with its groups moved awaits nothing:
        a node dead for days must not hold the head at a read every cycle."""
        if self._read_at is None or now - self._read_at >= self.cfg.slurm_poll_s:
            return True
        if any(self._awaits_decision(name) for name in self.silent_since):
            return True
        if any(now - t < RESUME_WATCH_S for t in self.answering_since.values()):
            return True
        return any(t != float("inf") and now < t + FAILED_GRACE_S for t in self.not_before.values())

    def _resumable(self, ring: Ring, nodes: dict[str, NodeInfo]) -> bool:
        """A node drained or marked DOWN for silence answers again, and the view says Slurm hears it: a resume is due."""
        return any(
            n not in self.silent_since and (info := nodes.get(n)) is not None and info.registered
            for n in ring.silence_drained
        )

    def _awaits_decision(self, name: str) -> bool:
        if self._view is None or self._ring is None or (info := self._view[1].get(name)) is None:
            return True
        if info.is_down:
            return False
        if not info.is_drained:
            return True
        ours = (info.reason or "").startswith(REASON_PREFIX)
        return ours and any((j, self._restarts_of(j)) not in self.moved for j, _ in self._ring.jobs_on.get(name, []))

    def _read_slurm(self, now: float) -> bool:
        """Two reads of slurmctld: every lamplighter job it remembers (the queue, the failed jobs and their
        records, in one squeue) and the nodes. The jobs are published as the table the node daemons check
        their trainers against (job_table.py)."""
        try:
            records = self.api.all_jobs(self.cfg.job_prefix)
            nodes = {n.name: n for n in self.api.nodes()}
        except SlurmError as e:
            log.error("head: cannot read the queue or nodes: %s", e)
            return False
        queue = [queue_entry(r) for r in records if r.state not in ENDED_STATES]
        self._view, self._read_at = (queue, nodes), now
        if self.metrics is not None:
            self.metrics.drain_budget.set(budget_limit(len(nodes), self.cfg.max_drain_fraction))
            self.metrics.nodes_out.set(len(held_out(list(nodes.values()))))
        self._ring = watch_ring(queue, nodes)
        self._restarts = {r.job_id: r.restarts for r in records}
        if self.cfg.cluster_status_dir:
            infos = {r.job_id: r for r in records}
            try:
                doc = table_doc(now, self.cfg.node_name or "head", infos)
                publish(Path(self.cfg.cluster_status_dir), doc, self.table_mode)
            except OSError as e:
                log.warning("head: cannot publish the job table to %s: %s", self.cfg.cluster_status_dir, e)
            if self._ring.where != self._published_ring and self.cfg.head_probe_sweep > 0:
                try:
                    publish_ring(Path(self.cfg.cluster_status_dir), self.cfg.node_name or "head", self._ring.where)
                    self._published_ring = dict(self._ring.where)
                except OSError as e:
                    log.warning("head: cannot publish the ring to %s: %s", self.cfg.cluster_status_dir, e)
        self._release_held(now, queue)
        self._requeue_failed(now, [r for r in records if r.state in FAILED_STATES])
        return True

    def _restarts_of(self, job_id: int) -> int:
        """The job's restart count as the last look at it said (moved jobs are remembered per restart)."""
        return self._restarts.get(job_id, 0)

    def _release_held(self, now: float, queue: list[QueueEntry]) -> None:
        for job_id in to_release(now, queue, self.released):
            self.released[job_id] = now
            try:
                self.api.release(job_id)
                log.warning("head: job %s was held by Slurm after a failed launch: released", job_id)
            except SlurmError as e:
                log.warning("head: could not release job %s held after a failed launch: %s", job_id, e)

    def _requeue_failed(self, now: float, failed: list[JobInfo]) -> None:
        """Group jobs FAILED with nobody to requeue them (supervisor/head/failed_jobs.py): each failed attempt judged
        once. Its full record (run directory, exit code) is read only when its grace is over."""
        for entry in failed:
            group = group_of(entry.name)
            if group is None:
                continue  # the job's Lighthouse: its own script restarts it
            key = (entry.job_id, entry.restarts)
            self.not_before.setdefault(key, now + FAILED_GRACE_S)
            if self.not_before[key] > now:
                continue
            try:
                info = self.api.job(entry.job_id)
            except SlurmError as e:
                log.warning("head: cannot read failed job %s (again in %g s): %s", entry.job_id, RETRY_S, e)
                self.not_before[key] = now + RETRY_S
                continue
            if (info.job_id, info.restarts) != key or info.state not in FAILED_STATES:
                continue  # requeued or purged since the queue was read: the next read sees it as it is
            self.not_before[key] = float("inf")
            run_dir = run_dir_of(info)
            if run_dir is None:
                log.warning(
                    "head: failed job %s (%s) has no lamplighter run directory: left alone", info.job_id, info.name
                )
                continue
            try:
                attempt = read_attempt(info, group, run_dir)
            except ConfigError as e:
                log.error("head: failed job %s: cannot read its config (again in %g s): %s", info.job_id, RETRY_S, e)
                self.not_before[key] = now + RETRY_S
                continue
            verdict = judge(now, attempt)
            log.warning("head: %s: %s", verdict.reason, "requeueing it" if verdict.requeue else "left FAILED")
            if not verdict.requeue:
                continue
            try:
                res = requeue_elsewhere(
                    self.api,
                    self.executor.updater,
                    info.job_id,
                    attempt.node,
                    now + verdict.delay_s,
                    now,
                    attempt.attempt,
                )
                log.info("head: failed job %s: %s", info.job_id, res)
            except (SlurmError, TimeoutError) as e:
                log.warning("head: could not requeue failed job %s (again in %g s): %s", info.job_id, RETRY_S, e)
                self.not_before[key] = now + RETRY_S

    def _restart_jobs_of(self, node: str, jobs: list[Any]) -> None:
        """Slurm requeued them when the node went down; start them now, elsewhere: off every node of their last
        allocation, each of which revoked the job's credential (a multi-node group started at once on its
        surviving node is killed for good, "Job credential revoked", and Slurm requeues it a second time)."""
        for j in jobs:
            last = expand_hostlist(j.nodes)
            if node in last:
                try:
                    res = start_elsewhere(
                        self.api,
                        self.executor.updater,
                        j.job_id,
                        last,
                        0.0,
                        nodes_needed=len(last),
                    )
                    log.info("head: job %s of dead node %s: %s", j.job_id, node, res)
                except (SlurmError, TimeoutError) as e:
                    log.warning("head: could not start job %s of dead node %s at once: %s", j.job_id, node, e)

    def status(self) -> dict[str, Any]:
        return {
            "role": "head",
            "cycles": self.cycles,
            "silent_nodes": dict(self.silent_since),
            "probed_last_cycle": self.probed_last,
            "watched_nodes": 0 if self._ring is None else len(self._ring.where),
            "slurm_read_at": self._read_at,  # the view the probes and decisions use: a job started since is unseen
            "marked_down": list(self.last_marked),
        }

    def close(self) -> None:
        return None
