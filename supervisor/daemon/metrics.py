"""The daemon's Prometheus metrics, in their own registry, served on localhost by default.

The HTTP endpoint only ever serves these numbers: whatever a client sends, no
request can make the daemon act. Counters start from zero when the daemon
restarts (Prometheus' rate() handles the reset); restart budgets themselves
live in the persisted state, not here.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

log = logging.getLogger(__name__)

PREFIX = "lamplighter"
DEFAULT_HOST = "127.0.0.1"


@dataclass
class DaemonMetrics:
    """Every metric the node daemon exports; one instance per daemon, each with its own registry."""

    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        r = self.registry
        self.gpu_health = Gauge(
            f"{PREFIX}_gpu_health",
            "1 for the GPU's current health status, 0 for its others",
            ["gpu", "status"],
            registry=r,
        )
        self.faults = Counter(f"{PREFIX}_faults", "Faults detected, by kind", ["kind"], registry=r)
        self.detection_latency = Histogram(
            f"{PREFIX}_detection_latency_seconds",
            "From a fault's occurrence (as far as known) to its detection",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
            registry=r,
        )
        self.recovery = Histogram(
            f"{PREFIX}_recovery_seconds",
            "From a fault's detection to the failed group committing a step again",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
            registry=r,
        )
        self.restarts = Counter(f"{PREFIX}_restarts", "Restarts of a replica group, by group", ["group"], registry=r)
        self.quorum_changes = Counter(f"{PREFIX}_quorum_changes", "Quorum changes seen", registry=r)
        self.heal = Histogram(
            f"{PREFIX}_heal_seconds",
            "A restarted group's weight transfer from a live peer",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 120),
            registry=r,
        )
        self._statuses: dict[str, set[str]] = {}
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
        self.restarts.labels(group=group).inc()


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
