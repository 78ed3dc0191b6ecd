"""The daemon's metrics: every declared metric is updated by the code where its event happens, the names follow
Prometheus conventions, and the Grafana dashboard uses exactly what the real exporter serves."""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from lamplighter.configs.schema import HealthConfig
from lamplighter.lighthouse.status import LighthouseStatus, LighthouseStatusError
from lamplighter.rundir.actions import ActionLog
from lamplighter.rundir.steplog import StepRecord
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.metrics import DaemonMetrics, start_metrics_server
from lamplighter.supervisor.node.job_settings import JobSettings
from lamplighter.supervisor.node.job_watch import JobWatch
from lamplighter.supervisor.node.recovery_watch import recovery_of
from lamplighter.supervisor.node_policy import TrainerEvent

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "lamplighter.json"


def _scrape(port: int, method: str = "GET", path: str = "/metrics") -> str:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read().decode()


def step(t: float, attempt: int, healed: str | None = None) -> StepRecord:
    return StepRecord(t, 0, int(t), True, 2, 1, healed, 1.0, "h", attempt, 4, 0)


def exercised() -> DaemonMetrics:
    """A registry in which every metric was updated once, through the functions the daemon calls."""
    m = DaemonMetrics()
    m.set_mode("act")
    m.proctrack_cgroup.set(1)
    m.set_trainers({"llama": 2, "old": 1})
    m.set_trainers({"llama": 2})  # "old" has no trainer left here: its series goes
    gpu = [GpuObservation(0, "ok", "healthy", "GPU 0 healthy"), GpuObservation(1, "ok", "healthy", "GPU 1 healthy")]
    m.gpus(10.0, gpu)
    m.gpus(11.0, [gpu[0], GpuObservation(1, "fault", "ecc-uncorrectable", "GPU 1 uncorrectable ECC +2")])
    m.gpus(12.0, [gpu[0], GpuObservation(1, "fault", "ecc-uncorrectable", "GPU 1 uncorrectable ECC +2")])
    exit_ev = TrainerEvent("exit", "41", 0, "trainer exited", 1, {"exited_at": 11.5}, group="llama/g1")
    straggler = TrainerEvent("hang", "99", 0, "handled before", detail={"silent_s": 31.0})
    m.trainer_faults(12.0, [exit_ev, straggler], acted_on={"41"})
    ActionLog("n1", lambda _line: None, on_action=m.action).write(12.0, "requeue", "41", "why", {}, outcome="ok")
    m.restart("llama/g2")
    found = recovery_of([step(100.0, 0), step(101.0, 0), step(107.5, 100, "peer:0")], restarts=1)
    assert found == (6.5, "peer")
    m.recovery.labels(job_name="llama").observe(found[0])
    m.heals.labels(job_name="llama", source=found[1]).inc()
    # A job's watch reads its Lighthouse: quorum 1, 1, 2, then it stops answering (twice), then answers.
    pages: list[LighthouseStatus | None] = [status(1), status(1), status(2), None, None, status(2)]

    def fetch(_address: str, _timeout: float) -> LighthouseStatus:
        page = pages.pop(0)
        if page is None:
            raise LighthouseStatusError("connection refused")
        return page

    settings = JobSettings(health=HealthConfig(progress="lighthouse"), lighthouse="http://127.0.0.1:1")
    watch = JobWatch("llama", None, settings, fetch, 0.5, Path("/proc"), dict, m)
    for t in range(6):
        watch.hangs(float(t))
    # What the job watch will call once it names the job (supervisor/metrics.py): quorum 3, 5, gone, 5.
    for quorum in (3, 5, None, 5):
        m.lighthouse_read("llama", quorum)
    # The job watch's gauges (tests/daemon/test_settings_fallback.py drives them through the loop).
    m.job_settings("llama", True)
    m.lighthouse_unreadable("llama", False)
    return m


def status(quorum_id: int) -> LighthouseStatus:
    return LighthouseStatus(quorum_id, "", quorum_id, 0.1, [], [])


def test_every_metric_is_updated_where_its_event_happens_and_served_over_loopback() -> None:
    m = exercised()
    server = start_metrics_server(m.registry, port=0)
    try:
        assert server.port > 0 and server.host == "127.0.0.1"
        text = _scrape(server.port)
        assert 'lamplighter_gpu_health{gpu="1",status="fault"} 1.0' in text
        assert 'lamplighter_gpu_health{gpu="1",status="ok"} 0.0' in text
        # A GPU that stays faulty is one fault; a trainer event the policy ignored is none.
        assert 'lamplighter_faults_detected_total{job_name="",kind="gpu-ecc-uncorrectable"} 1.0' in text
        assert (
            'lamplighter_faults_detected_total{job_name="llama",kind="exit"} 1.0' in text and 'kind="hang"' not in text
        )
        assert "lamplighter_fault_detection_latency_seconds_count 2.0" in text
        assert "lamplighter_fault_detection_latency_seconds_sum 1.5" in text  # GPU 1.0 s + exit 0.5 s
        assert 'lamplighter_actions_total{action="requeue",job_name="",outcome="ok"} 1.0' in text
        # Series the alert rules' increase() must see from 0 exist before their first event.
        assert 'lamplighter_actions_total{action="give_up",job_name="",outcome="logged"} 0.0' in text
        assert 'lamplighter_group_requeues_total{group="2",job_name="llama"} 1.0' in text
        assert re.search(r'lamplighter_build_info\{python="[0-9.]+",version="[0-9][^"]*"\} 1.0', text)
        assert 'lamplighter_mode{mode="act"} 1.0' in text and 'lamplighter_mode{mode="observe"} 0.0' in text
        assert 'lamplighter_group_recovery_seconds_sum{job_name="llama"} 6.5' in text
        assert 'lamplighter_group_heals_total{job_name="llama",source="peer"} 1.0' in text
        # The job watch's own calls (no job yet), and the job-named ones: 3 -> 5 is two quorum changes.
        assert 'lamplighter_quorum_changes_total{job_name=""} 1.0' in text
        assert 'lamplighter_lighthouse_unreachable_total{job_name=""} 1.0' in text
        assert 'lamplighter_quorum_changes_total{job_name="llama"} 2.0' in text
        assert 'lamplighter_lighthouse_unreachable_total{job_name="llama"} 1.0' in text
        assert 'lamplighter_job_settings_fallback{job_name="llama"} 1.0' in text
        assert 'lamplighter_lighthouse_unreadable{job_name="llama"} 0.0' in text
        with pytest.raises(urllib.error.HTTPError) as err:
            _scrape(server.port, method="POST", path="/anything")
        assert err.value.code == 405
    finally:
        server.close()


def test_two_daemons_watching_one_job_serve_the_same_job_counts() -> None:
    """Each counts the job's quorum changes by the Lighthouse's own id: a daemon that missed reads (its
    cycle was slow, or it started later) serves the same number, so max by (job_name) is the job's count."""
    a, b = DaemonMetrics(), DaemonMetrics()
    for quorum in (1, 2, 3, 4, 7):
        a.lighthouse_read("llama", quorum)
    for quorum in (1, 4, None, 7):  # b missed 2 and 3, and lost the Lighthouse once
        b.lighthouse_read("llama", quorum)
    changes = [m.registry.get_sample_value("lamplighter_quorum_changes_total", {"job_name": "llama"}) for m in (a, b)]
    assert changes == [6.0, 6.0]
    lost = [
        m.registry.get_sample_value("lamplighter_lighthouse_unreachable_total", {"job_name": "llama"}) for m in (a, b)
    ]
    assert lost == [0.0, 1.0]
    # A Lighthouse that restarts without its memory counts again from its new, lower id.
    a.lighthouse_read("llama", 1)
    a.lighthouse_read("llama", 2)
    assert a.registry.get_sample_value("lamplighter_quorum_changes_total", {"job_name": "llama"}) == 7.0


def test_names_follow_prometheus_conventions() -> None:
    for fam in DaemonMetrics().registry.collect():
        assert fam.name.startswith("lamplighter_")
        if fam.type == "counter":
            assert not fam.name.endswith("_total")  # the client adds it: exported as <name>_total
        if fam.type == "histogram":
            assert fam.name.endswith("_seconds"), fam.name


def test_dashboard_uses_only_exported_names_and_shows_every_metric() -> None:
    m = exercised()
    server = start_metrics_server(m.registry, port=0)
    try:
        families = list(text_string_to_metric_families(_scrape(server.port)))
    finally:
        server.close()
    exported = {s.name for fam in families for s in fam.samples}
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    used = {name for e in exprs for name in re.findall(r"\blamplighter_[a-z0-9_]+", e)}
    assert used and used <= exported, f"not exported: {sorted(used - exported)}"
    shown = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    declared = {fam.name for fam in m.registry.collect()}
    assert {d for d in declared if not any(s == d or s.startswith(d + "_") for s in shown)} == set()


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


def test_recovery_watch_measures_a_restarted_group_once_from_its_step_log(tmp_path: Path) -> None:
    from lamplighter.rundir.contract import RunPaths
    from lamplighter.rundir.steplog import append_step
    from lamplighter.supervisor.node.recovery_watch import RecoveryWatch
    from lamplighter.supervisor.node.trainers import NodeTrainer

    m = DaemonMetrics()
    watch = RecoveryWatch(m)
    trainer = NodeTrainer(10, 1, 5, "S", "lab", 2, "77", "0", 0, "n1", str(tmp_path), 1, os.getuid(), 0.0, 10)
    log = RunPaths(tmp_path).steps(2)
    append_step(log, step(200.0, 0))
    append_step(log, step(200.5, 1))  # an in-job restart of Slurm's first run: still restart 0
    watch.observe(201.0, [trainer])  # Slurm's restart 1 has not committed yet
    assert m.registry.get_sample_value("lamplighter_group_recovery_seconds_count", {"job_name": "lab"}) is None
    append_step(log, step(203.0, 100, "checkpoint:190"))
    watch.observe(204.0, [trainer])
    watch.observe(205.0, [trainer])  # once per (job, attempt)
    lab = {"job_name": "lab"}
    assert m.registry.get_sample_value("lamplighter_group_recovery_seconds_sum", lab) == 2.5
    assert m.registry.get_sample_value("lamplighter_group_recovery_seconds_count", lab) == 1.0
    assert m.registry.get_sample_value("lamplighter_group_heals_total", {**lab, "source": "checkpoint"}) == 1.0


def test_every_job_event_metric_carries_the_job_name() -> None:
    """A job's people alert on their job: every counter and histogram of job events is labelled by it (GPU health,
    the build and GPU-fault latencies are the node's own)."""
    node_level = {
        "lamplighter_gpu_health",
        "lamplighter_build_info",
        "lamplighter_mode",
        "lamplighter_proctrack_cgroup",
        "lamplighter_job_table_refused",
        "lamplighter_drain_budget_nodes",
        "lamplighter_nodes_out",
        "lamplighter_fault_detection_latency_seconds",
    }
    m = DaemonMetrics()
    unlabelled = [
        c._name for c in m.registry._collector_to_names if c._name not in node_level and "job_name" not in c._labelnames
    ]
    assert unlabelled == []


def test_adopted_trainers_are_counted_by_job_and_a_job_gone_loses_its_series() -> None:
    m = exercised()
    assert m.registry.get_sample_value("lamplighter_trainers_adopted", {"job_name": "llama"}) == 2
    assert m.registry.get_sample_value("lamplighter_trainers_adopted", {"job_name": "old"}) is None
    assert m.registry.get_sample_value("lamplighter_proctrack_cgroup") == 1


def test_a_jobs_quorum_memory_goes_with_its_watch_and_its_counter_stays() -> None:
    """A daemon outlives many jobs: what it keeps per job ends with the job's watch here."""
    m = DaemonMetrics()
    for quorum in (1, 4):
        m.lighthouse_read("llama", quorum)
    changes = {"job_name": "llama"}
    assert m.registry.get_sample_value("lamplighter_quorum_changes_total", changes) == 3.0
    m.job_watch_ended("llama")
    assert "llama" not in m._quorum_ids and "llama" not in m._last_quorum
    # Back on this node later: its first read is a first read again, and the counter never went back.
    m.lighthouse_read("llama", 9)
    assert m.registry.get_sample_value("lamplighter_quorum_changes_total", changes) == 3.0
    m.lighthouse_read("llama", 10)
    assert m.registry.get_sample_value("lamplighter_quorum_changes_total", changes) == 4.0
