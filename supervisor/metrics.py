"""The daemon's Prometheus metrics, in their own registry, served on localhost by default.

Every metric here is updated where its event happens (the list is also the
Grafana dashboard's vocabulary, deploy/grafana/; a test scrapes the real
exporter and checks the dashboard uses only these names):

| metric | type | updated by |
|---|---|---|
| lamplighter_build_info{version,python} | gauge, always 1 | at start: which lamplighter runs where (`count by (version)`) |
| lamplighter_mode{mode} | gauge, 1 for the current mode | at start: act, or observe (decides and logs, acts on nothing) |
| lamplighter_job_table_refused | gauge, 1 or 0 | each check against the head's job table (compute): 1 while the table is there but refused (not root's, too old, broken), so this daemon polls slurmctld itself; the reason is logged once per change |
| lamplighter_proctrack_cgroup | gauge, 1 or 0 | at start (compute): 0 when Slurm's ProctrackType is not proctrack/cgroup or unreadable: no trainer is adopted |
| lamplighter_drain_budget_nodes | gauge | head, each read of Slurm: the cluster's drain budget, floor(max_drain_fraction x nodes) |
| lamplighter_nodes_out | gauge | head, each read of Slurm: the nodes drained or down with a `lamplighter: ` reason now, against that budget |
| lamplighter_trainers_adopted{job_name} | gauge | compute loop, every cycle: the trainer processes supervised now, by job (a job with none loses its series) |
| lamplighter_gpu_health{gpu,status} | gauge, 1 for the current status | compute loop, every GPU probe cycle |
| lamplighter_faults_detected_total{kind,job_name} | counter | compute loop: a GPU turning faulty/unresponsive (job_name ""), a trainer fault acted on |
| lamplighter_fault_detection_latency_seconds | histogram | same: from the last sign of health (exit time, last heartbeat, last healthy GPU reading) |
| lamplighter_actions_total{action,outcome,job_name} | counter | action log: every kill, drain, requeue, mark-down, give-up, refusal (`log`: a drain or mark-down the rate limit refused) |
| lamplighter_group_requeues_total{job_name,group} | counter | executor, a requeue carried out |
| lamplighter_group_recovery_seconds{job_name} | histogram | recovery watch, on the node where a restarted group's rank 0 commits again |
| lamplighter_group_heals_total{job_name,source} | counter | recovery watch: how that group got its state (peer, checkpoint) |
| lamplighter_quorum_changes_total{job_name} | counter | job watch: the job's Lighthouse's own count of quorum changes since this daemon watched it |
| lamplighter_lighthouse_unreachable_total{job_name} | counter | job watch: a job's Lighthouse stopped answering (restart, crash, network) |
| lamplighter_lighthouse_unreadable{job_name} | gauge, 1 or 0 | job watch: 1 while a job's Lighthouse answers a /status page this lamplighter cannot parse (another torchft): no hang check from it |
| lamplighter_job_settings_fallback{job_name} | gauge, 1 or 0 | job watch: 1 while a job here is supervised with the fallback because its job.json could not be used (unreadable, invalid, an unknown format version: supervisor/node/job_settings.py); the series goes when the job leaves the node |

The label is `job_name`, not `job`: Prometheus attaches its own `job` (the
scrape job) to every series, and renames a scraped `job` to `exported_job`.

Job-level events (quorum changes, the Lighthouse lost) are seen by every
daemon watching the job, so each such daemon serves the same numbers for it:
a quorum change is counted from the Lighthouse's own quorum id (a daemon that
read quorum 7, then 10, counts 3, whether or not it read 8 and 9), not from
this daemon's reads. Aggregate them with `max by (job_name)`, never `sum`:
the job's count once, however many nodes watch it (the dashboard and the
alert rules in deploy/ do).

The HTTP endpoint only ever serves these numbers: whatever a client sends, no
request can make the daemon act. Counters start from zero when the daemon
restarts (Prometheus' rate() handles the reset); restart budgets themselves
live in the persisted state, not here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

log = logging.getLogger(__name__)

PREFIX = "lamplighter"
DEFAULT_HOST = "127.0.0.1"
BAD_GPU = ("fault", "unresponsive")
NO_JOB = ""  # job_name of what concerns the node, not a job (a GPU fault, a drain)
# Series that exist from the start at 0, so that the first event is an increase() the alert rules see
# (a counter child created at its first event starts at 1, and increase() sees no change).
PRESET_ACTIONS = (
    ("drain", "ok"),
    ("drain", "failed"),
    ("log", "logged"),
    ("give_up", "logged"),
    ("requeue", "failed"),
    ("resume", "undone"),  # a drain taken back: the cluster's budget was spent first (slurm/drain_budget.py)
)


@dataclass
class DaemonMetrics:
    """Every metric the node daemon exports; one instance per daemon, each with its own registry."""

    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        r = self.registry
        self.gpu_health = Gauge(
            f"{PREFIX}_gpu_health",
            "1 for the GPU's current health status (ok, fault, unresponsive, unknown), 0 for the others it had",
            ["gpu", "status"],
            registry=r,
        )
        self.build_info = Gauge(
            f"{PREFIX}_build_info",
            "Always 1: the lamplighter version this daemon runs",
            ["version", "python"],
            registry=r,
        )
        self.build_info.labels(**build_labels()).set(1)
        self.mode = Gauge(
            f"{PREFIX}_mode",
            "1 for the mode this daemon runs in (act: it carries actions out; observe: it only logs them)",
            ["mode"],
            registry=r,
        )
        # prometheus_client adds _total to counters on exposition; the names below are the exported ones.
        self.faults = Counter(
            f"{PREFIX}_faults_detected",
            "Faults detected, by kind (gpu-<kind>, exit, hang, dstate, memory) and job (\"\": the node's, a GPU's)",
            ["kind", "job_name"],
            registry=r,
        )
        self.detection_latency = Histogram(
            f"{PREFIX}_fault_detection_latency_seconds",
            "From the last sign of health (a trainer's exit, its last heartbeat, the GPU's last healthy reading) "
            "to the fault's detection",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.actions = Counter(
            f"{PREFIX}_actions",
            "Actions taken or refused, by kind, outcome and job (log: a drain or mark-down the rate limit refused)",
            ["action", "outcome", "job_name"],
            registry=r,
        )
        for action, outcome in PRESET_ACTIONS:
            self.actions.labels(action=action, outcome=outcome, job_name=NO_JOB)
        self.requeues = Counter(
            f"{PREFIX}_group_requeues",
            "Requeues of a replica group's Slurm job, by job and group",
            ["job_name", "group"],
            registry=r,
        )
        self.recovery = Histogram(
            f"{PREFIX}_group_recovery_seconds",
            "A restarted group: from its last committed step before the failure to its first committed step after",
            ["job_name"],
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
            registry=r,
        )
        self.heals = Counter(
            f"{PREFIX}_group_heals",
            "Restarted groups by where their first state came from (peer, checkpoint, none)",
            ["job_name", "source"],
            registry=r,
        )
        self._quorum_changes = Counter(
            f"{PREFIX}_quorum_changes",
            "Quorum changes of a job's Lighthouse by its own quorum id, the same on every daemon watching the job: "
            "aggregate with max by (job_name)",
            ["job_name"],
            registry=r,
        )
        self._lighthouse_unreachable = Counter(
            f"{PREFIX}_lighthouse_unreachable",
            "Times a job's Lighthouse stopped answering this daemon (a restart, a crash, the network): "
            "aggregate with max by (job_name)",
            ["job_name"],
            registry=r,
        )
        # What supervisor/node/job_watch.py calls today (`.inc()`, no job): counted under job_name "" until it calls
        # lighthouse_read(job, quorum_id) instead; then these two go.
        self.quorum_changes = self._quorum_changes.labels(job_name=NO_JOB)
        self.lighthouse_unreachable = self._lighthouse_unreachable.labels(job_name=NO_JOB)
        self._settings_fallback = Gauge(
            f"{PREFIX}_job_settings_fallback",
            "1 while a job here is supervised with the fallback (its hangs reported, not acted on) because its "
            "job.json could not be used: unreadable, invalid or of an unknown format version; see its actions.jsonl",
            ["job_name"],
            registry=r,
        )
        self._lighthouse_unreadable = Gauge(
            f"{PREFIX}_lighthouse_unreadable",
            "1 while a job's Lighthouse answers a /status page this lamplighter cannot parse (another torchft's): "
            "its progress cannot be read, so no hang check comes from it",
            ["job_name"],
            registry=r,
        )
        self.proctrack_cgroup = Gauge(
            f"{PREFIX}_proctrack_cgroup",
            "1 when Slurm tracks job processes with cgroups (ProctrackType=proctrack/cgroup); 0 when it does not or "
            "cannot be read: the daemon then adopts no trainer, so it watches nothing",
            registry=r,
        )
        self.job_table_refused = Gauge(
            f"{PREFIX}_job_table_refused",
            "1 while the head's job table in cluster_status_dir is there but not taken (not root's, as on a "
            "root_squash export; too old; broken): this daemon then asks slurmctld itself; see its log",
            registry=r,
        )
        self.drain_budget = Gauge(
            f"{PREFIX}_drain_budget_nodes",
            "The cluster's drain budget (head): how many nodes lamplighter may hold out of service at once, "
            "floor(max_drain_fraction x nodes)",
            registry=r,
        )
        self.nodes_out = Gauge(
            f"{PREFIX}_nodes_out",
            "Nodes drained or down with a lamplighter reason now (head), against lamplighter_drain_budget_nodes",
            registry=r,
        )
        self._trainers = Gauge(
            f"{PREFIX}_trainers_adopted",
            "Trainer processes this daemon supervises now (verified against Slurm and their cgroup), by job",
            ["job_name"],
            registry=r,
        )
        self._trainer_jobs: set[str] = set()
        self._quorum_ids: dict[str, int | None] = {}  # job -> the quorum id last read (None: not answering)
        self._last_quorum: dict[str, int] = {}  # job -> the last quorum id it answered
        self._statuses: dict[str, set[str]] = {}
        self._gpu_status: dict[int, str] = {}
        self._gpu_ok_t: dict[int, float] = {}
        self._lock = threading.Lock()

    def set_trainers(self, per_job: dict[str, int]) -> None:
        """The trainers adopted now, by job; a job with none left loses its series."""
        with self._lock:
            for job in self._trainer_jobs - set(per_job):
                self._trainers.remove(job)
            for job, n in per_job.items():
                self._trainers.labels(job_name=job).set(n)
            self._trainer_jobs = set(per_job)

    def set_mode(self, mode: str) -> None:
        """The node config's mode: 1 for it, 0 for the other (a dashboard counts the nodes still observing)."""
        for m in ("act", "observe"):
            self.mode.labels(mode=m).set(1 if m == mode else 0)

    def set_gpu_health(self, gpu: str, status: str) -> None:
        """Mark `status` as the GPU's current one (1) and every other status it has had as 0."""
        with self._lock:
            seen = self._statuses.setdefault(gpu, set())
            seen.add(status)
            for s in seen:
                self.gpu_health.labels(gpu=gpu, status=s).set(1 if s == status else 0)

    def fault(self, kind: str, detection_latency_s: float | None = None, job: str = NO_JOB) -> None:
        self.faults.labels(kind=kind, job_name=job).inc()
        if detection_latency_s is not None:
            self.detection_latency.observe(max(detection_latency_s, 0.0))

    def restart(self, group: str) -> None:
        """A requeue of `group` ("<job name>/g<replica>") carried out."""
        job, replica = split_group(group)
        self.requeues.labels(job_name=job, group=replica).inc()

    def action(self, action: str, outcome: str, job: str = NO_JOB) -> None:
        self.actions.labels(action=action, outcome=outcome or "none", job_name=job).inc()

    def lighthouse_read(self, job: str, quorum_id: int | None) -> None:
        """One read of a job's Lighthouse: the quorum id it answered, or None when it did not answer.

        Quorum changes are counted by the Lighthouse's own id, so every daemon watching the job counts
        the same; an id lower than the last (the Lighthouse restarted without its memory) starts over."""
        before = self._quorum_ids.get(job)
        # Both series exist from the job's first read, at 0: the first event is then an increase() sees.
        lost = self._lighthouse_unreachable.labels(job_name=job)
        if quorum_id is None:
            if job not in self._quorum_ids or before is not None:
                lost.inc()
            self._quorum_ids[job] = None
            return
        counter = self._quorum_changes.labels(job_name=job)
        last = self._last_quorum.get(job)
        if last is not None and quorum_id > last:
            counter.inc(quorum_id - last)
        self._last_quorum[job] = quorum_id
        self._quorum_ids[job] = quorum_id

    def job_settings(self, job: str, fallback: bool) -> None:
        """Which settings a job watched here is supervised with: its own (0) or the fallback (1)."""
        self._settings_fallback.labels(job_name=job).set(1 if fallback else 0)

    def lighthouse_unreadable(self, job: str, unreadable: bool) -> None:
        """Whether the job's Lighthouse answers a page this lamplighter cannot parse (1) or not (0)."""
        self._lighthouse_unreadable.labels(job_name=job).set(1 if unreadable else 0)

    def job_watch_ended(self, job: str) -> None:
        """The job's watch ended here: its gauges go (one left at 1 would alert for good), and so does what was
        kept of its quorum (a daemon that outlives many jobs would otherwise keep every one's); its counters
        stay, as counters never go back."""
        for gauge in (self._settings_fallback, self._lighthouse_unreadable):
            try:
                gauge.remove(job)
            except KeyError:
                pass
        self._quorum_ids.pop(job, None)
        self._last_quorum.pop(job, None)

    def gpus(self, now: float, observations: Sequence[Any]) -> None:
        """One probe cycle's GPU observations: the health gauge, and a fault when a GPU turns bad."""
        for o in observations:
            self.set_gpu_health(str(o.gpu), o.status)
            before = self._gpu_status.get(o.gpu)
            if o.status in BAD_GPU and before not in BAD_GPU:
                ok_t = self._gpu_ok_t.get(o.gpu)
                self.fault(f"gpu-{o.kind}", None if ok_t is None else now - ok_t)
            if o.status == "ok":
                self._gpu_ok_t[o.gpu] = now
            self._gpu_status[o.gpu] = o.status

    def trainer_faults(self, now: float, events: Sequence[Any], acted_on: set[str]) -> None:
        """Trainer events the policy acted on (stragglers of a handled attempt are not new faults)."""
        for e in events:
            if getattr(e, "job_id", None) not in acted_on or not hasattr(e, "attempt"):
                continue
            latency: float | None = None
            if e.kind == "exit" and isinstance(e.detail.get("exited_at"), int | float):
                latency = now - float(e.detail["exited_at"])
            elif e.kind == "hang" and isinstance(e.detail.get("silent_s"), int | float):
                latency = float(e.detail["silent_s"])
            self.fault(e.kind, latency, split_group(e.group)[0] if getattr(e, "group", None) else NO_JOB)


def split_group(group: str) -> tuple[str, str]:
    """("llama", "2") from "llama/g2", the daemon's name for a group; (group, "") for anything else."""
    job, sep, replica = group.rpartition("/g")
    return (job, replica) if sep and job else (group, "")


def build_labels() -> dict[str, str]:
    import platform

    from lamplighter.system.installed import lamplighter_version

    return {"version": lamplighter_version(), "python": platform.python_version()}


@dataclass
class MetricsServer:
    host: str
    port: int  # the bound port (the real one when 0 was asked for)
    _server: WSGIServer
    _thread: threading.Thread

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_metrics_server(registry: CollectorRegistry, host: str = DEFAULT_HOST, port: int = 0) -> MetricsServer:
    """Serve `registry` over HTTP on host:port in a daemon thread; port 0 picks a free one."""
    from prometheus_client import start_http_server

    if host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("metrics: serving on %s:%d, reachable beyond this node (read-only)", host, port)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise OSError(e.errno, f"metrics: cannot serve on {host}:{port}: {e.strerror}") from e
    return MetricsServer(host, int(server.server_address[1]), server, thread)
