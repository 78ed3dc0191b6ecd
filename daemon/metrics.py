"""The daemon's Prometheus metrics, in their own registry, served on localhost by default.

Every metric here is updated where its event happens (the list is also the
Grafana dashboard's vocabulary, deploy/grafana/; a test scrapes the real
exporter and checks the dashboard uses only these names):

| metric | type | updated by |
|---|---|---|
| lamplighter_gpu_health{gpu,status} | gauge, 1 for the current status | compute loop, every GPU probe cycle |
| lamplighter_faults_detected_total{kind} | counter | compute loop: a GPU turning faulty/unresponsive, a trainer fault acted on |
| lamplighter_fault_detection_latency_seconds | histogram | same: from the last sign of health (exit time, last heartbeat, last healthy GPU reading) |
| lamplighter_actions_total{action,outcome} | counter | action log: every kill, drain, requeue, mark-down, give-up, refusal |
| lamplighter_group_requeues_total{group} | counter | executor, a requeue carried out |
| lamplighter_group_recovery_seconds | histogram | recovery watch, on the node where a restarted group commits again |
| lamplighter_group_heals_total{source} | counter | recovery watch: how that group got its state (peer, checkpoint) |
| lamplighter_quorum_changes_total | counter | job watch: a job's Lighthouse, read for progress, has a new quorum id |
| lamplighter_lighthouse_unreachable_total | counter | job watch: a job's Lighthouse stopped answering (restart, crash, network) |

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
        # prometheus_client adds _total to counters on exposition; the names below are the exported ones.
        self.faults = Counter(
            f"{PREFIX}_faults_detected",
            "Faults detected, by kind (gpu-<kind>, exit, hang, dstate, memory)",
            ["kind"],
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
            f"{PREFIX}_actions", "Actions taken or refused, by kind and outcome", ["action", "outcome"], registry=r
        )
        self.requeues = Counter(
            f"{PREFIX}_group_requeues", "Requeues of a replica group's Slurm job, by group", ["group"], registry=r
        )
        self.recovery = Histogram(
            f"{PREFIX}_group_recovery_seconds",
            "A restarted group: from its last committed step before the failure to its first committed step after",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
            registry=r,
        )
        self.heals = Counter(
            f"{PREFIX}_group_heals",
            "Restarted groups by where their first state came from (peer, checkpoint, none)",
            ["source"],
            registry=r,
        )
        self.quorum_changes = Counter(
            f"{PREFIX}_quorum_changes", "Quorum changes of the jobs' Lighthouses, as this daemon reads them", registry=r
        )
        self.lighthouse_unreachable = Counter(
            f"{PREFIX}_lighthouse_unreachable",
            "Times a job's Lighthouse stopped answering this daemon (a restart, a crash, the network)",
            registry=r,
        )
        self._statuses: dict[str, set[str]] = {}
        self._gpu_status: dict[int, str] = {}
        self._gpu_ok_t: dict[int, float] = {}
        self._lock = threading.Lock()

    def set_gpu_health(self, gpu: str, status: str) -> None:
        """Mark `status` as the GPU's current one (1) and every other status it has had as 0."""
        with self._lock:
            seen = self._statuses.setdefault(gpu, set())
            seen.add(status)
            for s in seen:
                self.gpu_health.labels(gpu=gpu, status=s).set(1 if s == status else 0)

    def fault(self, kind: str, detection_latency_s: float | None = None) -> None:
        self.faults.labels(kind=kind).inc()
        if detection_latency_s is not None:
            self.detection_latency.observe(max(detection_latency_s, 0.0))

    def restart(self, group: str) -> None:
        self.requeues.labels(group=group).inc()

    def action(self, action: str, outcome: str) -> None:
        self.actions.labels(action=action, outcome=outcome or "none").inc()

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
            self.fault(e.kind, latency)


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
