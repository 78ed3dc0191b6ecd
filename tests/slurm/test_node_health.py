"""Nodes lamplighter took out (recorded real output), the healthcheck's drain decision on FakeSlurm, the daemons'
published health, and how `lamplighter status` shows both."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from lamplighter.commands.healthcheck import drain
from lamplighter.commands.status import build_status, format_table
from lamplighter.configs.schema import JobConfig, NodeConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.slurm.drained_nodes import format_age, out_of_service, reason_time
from lamplighter.slurm.parsers import parse_scontrol_nodes
from lamplighter.slurm.submit.submission import submit_job
from lamplighter.supervisor.health_report import HealthPublisher, judge, read_reports, summarize

REC = Path(__file__).parent / "recorded"


def test_out_of_service_from_recorded_scontrol_output() -> None:
    nodes = parse_scontrol_nodes((REC / "scontrol_show_nodes_down.txt").read_text())
    stamp = datetime.fromisoformat("2026-11-22T02:20:36").timestamp()
    ours = out_of_service(nodes, now=stamp + 90, only_lamplighter=True)
    assert [(o.name, o.reason, o.by_lamplighter) for o in ours] == [("n3", "lamplighter: node silent 5s", True)]
    assert ours[0].age_s == 90 and format_age(ours[0].age_s) == "90s"
    drained = parse_scontrol_nodes((REC / "scontrol_show_node_drained.txt").read_text())
    assert [o.by_lamplighter for o in out_of_service(drained, stamp)] == [
        False
    ]  # "(lamplighter)" at the end is not ours
    assert reason_time(None) is None and reason_time("garbage") is None
    assert [format_age(a) for a in (None, 5, 600, 7200 * 3, 86400 * 3)] == ["-", "5s", "10m", "6.0h", "3.0d"]


def test_healthcheck_drain_keeps_an_admins_reason_and_the_rate_limit() -> None:
    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    cfg = NodeConfig(max_drain_fraction=0.25)
    assert drain(api, "n1", "GPU 0 lost", cfg, limit=True, now=100.0).startswith("drained: lamplighter: healthcheck:")
    assert api.node("n1").reason == "lamplighter: healthcheck: GPU 0 lost"
    # One node of four is the limit: a second would exceed it (a threshold wrong everywhere drains one node).
    assert "NOT drained: drain limit reached" in drain(api, "n2", "GPU 0 lost", cfg, limit=True, now=101.0)
    assert not api.node("n2").is_drained
    # limit=False (no command passes it: the HealthCheckProgram and the Prolog both keep the limit) drains past it.
    assert drain(api, "n2", "GPU 0 lost", cfg, limit=False, now=102.0).startswith("drained")
    api.drain("n3", "maintenance")
    assert "by someone else" in drain(api, "n3", "GPU 1 hot", cfg, limit=False, now=103.0)
    assert api.node("n3").reason == "maintenance"
    assert "no node 'n9'" in drain(api, "n9", "x", cfg, limit=False, now=104.0)


def status_doc(gpus: list[tuple[str, str]], trainers: int = 1) -> dict[str, object]:
    return {
        "node": "n2",
        "pid": 7,
        "role": "compute",
        "cycles": 3,
        "gpus": [{"gpu": i, "status": s, "kind": "k", "reason": r} for i, (s, r) in enumerate(gpus)],
        "trainers": [{"pid": 1, "job": "lab", "job_id": "5"}] * trainers,
    }


def test_health_report_published_on_change_and_refresh_and_judged_stale(tmp_path: Path) -> None:
    pub = HealthPublisher(tmp_path, "n2", refresh_s=10)
    ok = summarize(status_doc([("ok", "GPU 0 healthy")]), 100.0)
    assert ok["health"] == "ok" and ok["gpus"] == {"ok": 1} and ok["jobs"] == ["lab"]
    assert pub.publish(100.0, ok) and not pub.publish(101.0, summarize(status_doc([("ok", "")]), 101.0))
    assert pub.publish(111.0, summarize(status_doc([("ok", "")]), 111.0))  # refreshed
    bad = summarize(status_doc([("fault", "GPU 0 uncorrectable ECC +2 (max 0)")]), 112.0)
    assert bad["health"] == "gpu-fault" and pub.publish(112.0, bad)  # at once on a change
    assert json.loads((tmp_path / "n2.json").read_text())["problems"] == ["GPU 0 uncorrectable ECC +2 (max 0)"]
    assert oct((tmp_path / "n2.json").stat().st_mode & 0o777) == "0o644"  # users read it
    assert read_reports(tmp_path, 120.0)["n2"].health == "gpu-fault"
    assert read_reports(tmp_path, 112.0 + 31)["n2"].health == "stale"
    unknown = summarize(status_doc([("unknown", "GPU 0 health unknown: amdsmi unusable: ...")]), 1.0)
    assert unknown["health"] == "gpu-unknown"
    assert judge({"node": "n5", "t": 0.0, "health": "ok"}, now=5.0).health == "ok"


def test_unwritable_folder_is_not_fatal(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert not HealthPublisher(blocker / "sub", "n1").publish(1.0, {"health": "ok"})


def test_status_shows_daemons_of_the_jobs_nodes_and_lamplighters_drains(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3", "n4"])
    job = JobConfig.model_validate(
        {"name": "lab", "run_dir": str(tmp_path / "run"), "groups": {"count": 2}, "lighthouse": {"port": 29598}}
    )
    sub = submit_job(
        job, api, config_path="x.yaml", probe=lambda _a: None, read_address=lambda _r, _j: "http://n1:29598"
    )
    api.drain("n4", "lamplighter: GPU 3 uncorrectable ECC +2 (max 0)")
    jobs = {j: api.job(j) for j in sub.all_job_ids()}
    running = sorted({n for g in sub.groups.values() for n in (jobs[g].node_list or "").split(",") if n})
    reports = {running[0]: judge(summarize(status_doc([("ok", "")]) | {"node": running[0]}, 100.0), 105.0)}
    st = build_status(sub, jobs, api.nodes(), {}, [], None, "no lighthouse", now=105.0, daemons=reports)
    assert st["daemons"][running[0]]["health"] == "ok"
    assert all(st["daemons"][n]["health"] == "missing" for n in running[1:])
    assert [(n["node"], n["by_lamplighter"]) for n in st["nodes_out"]] == [("n4", True)]
    table = format_table(st)
    assert "n4      *" in table and "uncorrectable ECC +2" in table
    assert f"{running[0]:<8}ok" in table
    if running[1:]:
        assert "missing: no health report" in table
    no_dir = format_table(build_status(sub, jobs, api.nodes(), {}, [], None, "x", now=105.0))
    assert "node daemons: not shown" in no_dir
