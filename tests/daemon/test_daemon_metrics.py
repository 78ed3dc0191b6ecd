from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client import REGISTRY

from lamplighter.supervisor.daemon.metrics import DaemonMetrics, start_metrics_server


def _scrape(port: int, method: str = "GET", path: str = "/metrics") -> str:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read().decode()


def test_metrics_scraped_over_loopback() -> None:
    m = DaemonMetrics()
    m.set_gpu_health("0", "ok")
    m.set_gpu_health("0", "faulty")
    m.set_gpu_health("1", "ok")
    m.fault("ecc_uncorrectable", detection_latency_s=0.3)
    m.fault("trainer_exit")
    m.restart("llama/2")
    m.quorum_changes.inc()
    m.recovery.observe(4.2)
    m.heal.observe(0.2)
    server = start_metrics_server(m.registry, port=0)
    try:
        assert server.port > 0 and server.host == "127.0.0.1"
        text = _scrape(server.port)
        assert 'lamplighter_gpu_health{gpu="0",status="faulty"} 1.0' in text
        assert 'lamplighter_gpu_health{gpu="0",status="ok"} 0.0' in text
        assert 'lamplighter_gpu_health{gpu="1",status="ok"} 1.0' in text
        assert 'lamplighter_faults_total{kind="ecc_uncorrectable"} 1.0' in text
        assert 'lamplighter_faults_total{kind="trainer_exit"} 1.0' in text
        assert "lamplighter_detection_latency_seconds_count 1.0" in text
        assert 'lamplighter_restarts_total{group="llama/2"} 1.0' in text
        assert "lamplighter_quorum_changes_total 1.0" in text
        assert "lamplighter_recovery_seconds_sum 4.2" in text
        assert "lamplighter_heal_seconds_count 1.0" in text
        # Nothing but reading: other methods are refused.
        with pytest.raises(urllib.error.HTTPError) as err:
            _scrape(server.port, method="POST", path="/anything")
        assert err.value.code == 405
    finally:
        server.close()


def test_bound_to_loopback_only_and_not_in_global_registry() -> None:
    m = DaemonMetrics()
    server = start_metrics_server(m.registry, port=0)
    try:
        with socket.socket() as s:
            s.settimeout(5)
            s.connect(("127.0.0.1", server.port))
        bound = server._server.socket.getsockname()[0]
        assert bound == "127.0.0.1"
    finally:
        server.close()
    assert REGISTRY.get_sample_value("lamplighter_quorum_changes_total") is None
    DaemonMetrics()  # a second instance does not collide (its own registry)
