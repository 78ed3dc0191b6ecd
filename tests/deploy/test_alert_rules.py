"""The alert rules and the dashboard's job panels, evaluated by the real promtool on what real daemons export.

Each test scrapes DaemonMetrics instances (the daemon's own registry) minute by
minute while events happen, turns the scrapes into promtool's input series
(one instance per daemon, as Prometheus would label them), and has promtool
evaluate the rules file and the dashboard's expressions. promtool comes from
Debian's prometheus package (`make promtool`, not installed as a service);
without it these tests skip, saying so.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from realparts import missing

from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.metrics import DaemonMetrics

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "lamplighter-alerts.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "lamplighter.json"


def promtool() -> str:
    found = shutil.which("promtool") or str(REPO / "build" / "promtool" / "usr" / "bin" / "promtool")
    if not Path(found).is_file():
        missing("promtool", "`make promtool` takes it from Debian's prometheus package (none found here)")
    return found


def series_of(m: DaemonMetrics, instance: str) -> dict[str, float]:
    """One scrape of a daemon, as `name{labels}` -> value with the labels Prometheus adds."""
    out = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in fam.samples:
            labels = {**s.labels, "instance": instance, "job": "lamplighter"}
            out[s.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"] = s.value
    return out


def held(metric: str, daemons: dict[str, DaemonMetrics], minutes: int) -> list[dict[str, str]]:
    """Each daemon's series of `metric` (by name prefix), one scrape held constant for `minutes` (set once;
    scrapes, at the test's interval)."""
    return [
        {"series": name, "values": f"{v!r}+0x{minutes}"}
        for instance, m in daemons.items()
        for name, v in series_of(m, instance).items()
        if name.startswith(metric)
    ]


Step = Callable[[int], None]


def record(daemons: dict[str, DaemonMetrics], minutes: int, step: Step) -> list[dict[str, str]]:
    """Scrape every daemon once a minute for `minutes`, calling step(minute) before each scrape."""
    values: dict[str, list[str]] = {}
    for t in range(minutes):
        step(t)
        seen = {}
        for instance, m in daemons.items():
            seen.update(series_of(m, instance))
        for name, v in seen.items():
            values.setdefault(name, ["_"] * t).append(repr(v))
        for vs in values.values():
            if len(vs) < t + 1:
                vs.append("_")
    return [{"series": name, "values": " ".join(vs)} for name, vs in values.items()]


def run_promtool(tmp_path: Path, tests: list[dict[str, Any]], evaluation_interval: str = "1m") -> None:
    """evaluation_interval: a coarser one for tests over days (promtool evaluates every rule at each)."""
    doc = {"rule_files": [str(RULES)], "evaluation_interval": evaluation_interval, "tests": tests}
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def alerts(name: str, at: str, *labels: dict[str, str]) -> dict[str, Any]:
    """A promql test: the ALERTS series of `name` firing at `at` are exactly these."""
    samples = []
    for lab in labels:
        all_labels = {"alertname": name, "alertstate": "firing", **lab}
        samples.append({"labels": "ALERTS{" + ",".join(f'{k}="{v}"' for k, v in all_labels.items()) + "}", "value": 1})
    return {"expr": f'ALERTS{{alertname="{name}",alertstate="firing"}}', "eval_time": at, "exp_samples": samples}


def test_rules_file_passes_promtool_check() -> None:
    out = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_alerts_fire_on_what_the_daemons_export(tmp_path: Path) -> None:
    n1, n2 = DaemonMetrics(), DaemonMetrics()
    ok = GpuObservation(0, "ok", "healthy", "GPU 0 healthy")
    unknown = GpuObservation(1, "unknown", "amdsmi-install", "GPU 1 health unknown: no amdsmi")

    def step(t: int) -> None:
        n1.gpus(float(t), [ok, unknown if t >= 2 else GpuObservation(1, "ok", "healthy", "GPU 1 healthy")])
        n2.gpus(float(t), [ok])
        if t == 3:  # n2's drain refused by the rate limit; a group of llama given up on n1 (its first give-up)
            n2.action("log", "logged")
            n1.action("give_up", "logged", job="llama")

    series = record({"n1:9464": n1, "n2:9464": n2}, 30, step)
    # n2's daemon stops answering at minute 10: Prometheus' own `up` goes to 0.
    series.append({"series": 'up{instance="n1:9464",job="lamplighter"}', "values": "1+0x29"})
    series.append({"series": 'up{instance="n2:9464",job="lamplighter"}', "values": "1+0x9 0+0x19"})
    n1_gpu1 = {"instance": "n1:9464", "gpu": "1", "severity": "warning", "owner": "admin"}
    tests = [
        # A user's group given up warns that user (owner job-owner); it never pages the admins.
        alerts("LamplighterGroupGivenUp", "5m", {"job_name": "llama", "severity": "warning", "owner": "job-owner"}),
        alerts("LamplighterDrainRefused", "5m", {"instance": "n2:9464", "severity": "warning", "owner": "admin"}),
        alerts("LamplighterGpuUnknown", "10m"),  # unknown since minute 2: not yet 15 minutes
        alerts("LamplighterGpuUnknown", "20m", n1_gpu1),
        alerts("LamplighterDaemonDown", "11m"),  # down for 1 minute: not yet
        alerts(
            "LamplighterDaemonDown",
            "13m",
            {"instance": "n2:9464", "job": "lamplighter", "severity": "critical", "owner": "admin"},
        ),
        alerts("LamplighterGpuFault", "20m"),
    ]
    run_promtool(tmp_path, [{"interval": "1m", "input_series": series, "promql_expr_test": tests}])


def test_the_action_lighthouse_and_job_settings_alerts_fire_on_what_the_daemons_export(tmp_path: Path) -> None:
    """deploy/README's alerts for a failed action, a Lighthouse lost 3 times in 10 minutes, a job's settings
    not applied and a Lighthouse page not read: each fires for what it names, and only then."""
    n1, n2 = DaemonMetrics(), DaemonMetrics()

    def step(t: int) -> None:
        if t == 2:
            n1.action("drain", "failed")  # Slurm refused the drain
        # llama's Lighthouse stops answering at minutes 5, 7 and 9 (n1 reads it); gpt's once, at minute 5.
        n1.lighthouse_read("llama", None if t in (5, 7, 9) else 1)
        n2.lighthouse_read("gpt", None if t == 5 else 1)
        n2.job_settings("gpt", t >= 10)  # its job.json unusable from minute 10
        n2.lighthouse_unreadable("gpt", t >= 15)  # its page not understood from minute 15

    series = record({"n1:9464": n1, "n2:9464": n2}, 30, step)
    gpt = {"job_name": "gpt", "severity": "warning", "owner": "job-owner"}
    tests = [
        alerts(
            "LamplighterActionFailed",
            "5m",
            {"instance": "n1:9464", "action": "drain", "severity": "warning", "owner": "admin"},
        ),
        alerts("LamplighterActionFailed", "25m"),  # 15 minutes without another failure
        alerts("LamplighterLighthouseUnreachable", "8m"),  # twice so far
        alerts(
            "LamplighterLighthouseUnreachable",
            "10m",
            {"job_name": "llama", "severity": "warning", "owner": "job-owner"},
        ),
        alerts("LamplighterJobSettingsNotApplied", "11m"),  # for 1 minute: not yet
        alerts("LamplighterJobSettingsNotApplied", "13m", gpt),
        alerts("LamplighterLighthouseUnreadable", "18m"),
        alerts("LamplighterLighthouseUnreadable", "21m", gpt),
    ]
    run_promtool(tmp_path, [{"interval": "1m", "input_series": series, "promql_expr_test": tests}])


def test_a_node_left_observing_after_the_rollout_week_is_named(tmp_path: Path) -> None:
    observing, acting = DaemonMetrics(), DaemonMetrics()
    observing.set_mode("observe")
    acting.set_mode("act")
    # The mode is set once, at the daemon's start: held for 10 days, scraped (and the rules run) hourly.
    series = held("lamplighter_mode", {"n1:9464": observing, "n2:9464": acting}, 10 * 24)
    assert len(series) == 4
    tests = [
        alerts("LamplighterStillObserving", "7d"),
        alerts("LamplighterStillObserving", "9d", {"instance": "n1:9464", "severity": "info", "owner": "admin"}),
    ]
    run_promtool(tmp_path, [{"interval": "1h", "input_series": series, "promql_expr_test": tests}], "1h")


def test_a_node_whose_slurm_tracks_no_cgroups_is_named(tmp_path: Path) -> None:
    blind, tracking = DaemonMetrics(), DaemonMetrics()
    blind.proctrack_cgroup.set(0)
    tracking.proctrack_cgroup.set(1)
    series = held("lamplighter_proctrack_cgroup", {"n1:9464": blind, "n2:9464": tracking}, 20)
    assert len(series) == 2
    tests = [
        alerts("LamplighterNoCgroupTracking", "3m"),
        alerts("LamplighterNoCgroupTracking", "10m", {"instance": "n1:9464", "severity": "warning", "owner": "admin"}),
    ]
    run_promtool(tmp_path, [{"interval": "1m", "input_series": series, "promql_expr_test": tests}])


def test_a_node_that_refuses_the_heads_job_table_is_named(tmp_path: Path) -> None:
    refusing, taking = DaemonMetrics(), DaemonMetrics()
    refusing.job_table_refused.set(1)
    taking.job_table_refused.set(0)
    series = held("lamplighter_job_table_refused", {"n1:9464": refusing, "n2:9464": taking}, 30)
    assert len(series) == 2
    tests = [
        alerts("LamplighterJobTableRefused", "5m"),
        alerts("LamplighterJobTableRefused", "15m", {"instance": "n1:9464", "severity": "warning", "owner": "admin"}),
    ]
    run_promtool(tmp_path, [{"interval": "1m", "input_series": series, "promql_expr_test": tests}])


def dashboard_expr(title_start: str) -> str:
    dash = json.loads(DASHBOARD.read_text())
    panel = next(p for p in dash["panels"] if p["title"].startswith(title_start))
    return str(panel["targets"][0]["expr"]).replace("$job_name", ".+").replace("$node", ".*")


def test_the_dashboard_counts_each_job_event_once_however_many_daemons_watch_it(tmp_path: Path) -> None:
    """Two daemons watch one job (one reads its Lighthouse less often); the job had 4 quorum changes and
    lost its Lighthouse once: the dashboard's per-job panels say 4 and 1, not 8 and 2."""
    a, b = DaemonMetrics(), DaemonMetrics()
    reads_a = {0: 1, 5: 2, 10: 3, 15: None, 20: 4, 25: 5}
    reads_b = {1: 1, 11: 3, 16: None, 26: 5}

    def step(t: int) -> None:
        if t in reads_a:
            a.lighthouse_read("llama", reads_a[t])
        if t in reads_b:
            b.lighthouse_read("llama", reads_b[t])

    series = record({"n1:9464": a, "n2:9464": b}, 40, step)
    quorum = dashboard_expr("Quorum changes per hour, by job")
    lost = dashboard_expr("Lighthouse unreachable per hour, by job")
    assert "max by (job_name)" in quorum and "max by (job_name)" in lost
    # increase() extrapolates to the window's edges: evaluate a window that starts before the first read.
    tests = [
        {"expr": f"round({quorum})", "eval_time": "35m", "exp_samples": [{"labels": '{job_name="llama"}', "value": 4}]},
        {"expr": f"round({lost})", "eval_time": "35m", "exp_samples": [{"labels": '{job_name="llama"}', "value": 1}]},
    ]
    run_promtool(tmp_path, [{"interval": "1m", "input_series": series, "promql_expr_test": tests}])


def test_the_dashboard_has_a_row_per_job_and_per_node_chosen_by_their_variables() -> None:
    dash = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert "job_name" in variables and "node" in variables
    assert "job_name" in variables["job_name"]["query"]["query"] and "instance" in variables["node"]["query"]["query"]
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert "Jobs ($job_name)" in rows and "Nodes ($node)" in rows
    # Every panel below the job row filters by the chosen job, every panel below the node row by the node.
    current = None
    for p in dash["panels"]:
        if p["type"] == "row":
            current = p["title"]
            continue
        exprs = " ".join(t.get("expr", "") for t in p.get("targets", []))
        if current == "Jobs ($job_name)":
            assert "$job_name" in exprs, p["title"]
        if current == "Nodes ($node)":
            assert "$node" in exprs, p["title"]


def test_every_alert_has_an_owner_and_a_runbook_section_and_no_users_alert_pages() -> None:
    """Admin review P2-7: no runbooks, and a user's crash-looping script paged the admins at critical."""
    rules = yaml.safe_load(RULES.read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    runbook = (REPO / "deploy" / "RUNBOOK.md").read_text()
    sections = set(re.findall(r"(?m)^## (\S+)$", runbook))
    assert len(alerts) >= 10
    for a in alerts:
        owner, severity = a["labels"].get("owner"), a["labels"]["severity"]
        assert owner in ("admin", "job-owner"), a["alert"]
        assert not (owner == "job-owner" and severity == "critical"), a["alert"]
        if owner == "job-owner":
            assert "job_name" in a["expr"], f"{a['alert']}: a job-owner alert must say whose job"
        url = a["annotations"]["runbook_url"]
        assert url.endswith("RUNBOOK.md#" + a["alert"].lower()) and a["alert"].lower() in sections, a["alert"]
        assert f"**{a['alert']}**" in runbook
    assert len(sections) == len(alerts), sections ^ {a["alert"].lower() for a in alerts}


def head_metrics(tmp_path: Path, drained: int) -> DaemonMetrics:
    """A real head loop's metrics after one read of a fake 8-node Slurm with `drained` lamplighter drains."""
    from lamplighter.configs.schema import NodeConfig
    from lamplighter.lab.fake_slurm import FakeSlurm
    from lamplighter.rundir.actions import ActionLog
    from lamplighter.supervisor.executor import Executor
    from lamplighter.supervisor.head.loop import HeadLoop
    from lamplighter.supervisor.state_store import DaemonState

    slurm = FakeSlurm([f"n{i}" for i in range(1, 9)], clock=lambda: 1000.0)
    slurm.drain("n8", "admin: not ours, not counted")
    for i in range(1, drained + 1):
        slurm.drain(f"n{i}", f"lamplighter: GPU 0 uncorrectable ECC on n{i}")
    cfg = NodeConfig.model_validate({"role": "head", "state_dir": str(tmp_path / f"s{drained}")})
    metrics = DaemonMetrics()
    executor = Executor(DaemonState.load(tmp_path / f"h{drained}"), slurm, None, ActionLog("head", lambda line: None))
    head = HeadLoop(cfg, slurm, executor, lambda: 1000.0, tmp_path / "logs", metrics=metrics)
    head.probe = lambda addrs, timeout: set(addrs)
    head.cycle()
    return metrics


def test_the_whole_drain_budget_out_for_ten_minutes_is_named(tmp_path: Path) -> None:
    spent, within = head_metrics(tmp_path, 2), head_metrics(tmp_path, 1)  # budget 2 of 8 at 0.25
    assert spent.registry.get_sample_value("lamplighter_drain_budget_nodes") == 2.0
    assert spent.registry.get_sample_value("lamplighter_nodes_out") == 2.0  # the admin's drain is not counted
    assert within.registry.get_sample_value("lamplighter_nodes_out") == 1.0
    for metrics, fires in ((spent, True), (within, False)):
        series = held("lamplighter_drain_budget_nodes", {"head:9464": metrics}, 30)
        series += held("lamplighter_nodes_out", {"head:9464": metrics}, 30)
        firing = [{"severity": "warning", "owner": "admin"}] if fires else []
        tests = [alerts("LamplighterDrainBudgetSpent", "5m"), alerts("LamplighterDrainBudgetSpent", "15m", *firing)]
        run_promtool(tmp_path, [{"interval": "1m", "input_series": series, "promql_expr_test": tests}])
