"""`make demo-bare`, shortened: real hosts (their own network, PID, mount and UTS namespaces), etcd with TLS, the
Lighthouse, host daemons started as `lamplighter supervise`, a job from `lamplighter submit`; the placer's host
crashes, then a host's link is cut. Needs root, ip, unshare and etcd (as the whole suite does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from realparts import STEP_SLEEP_S

from lamplighter.lab.demo_bare import main

pytestmark = pytest.mark.integration


@pytest.mark.heavy(seconds=60)
def test_placer_host_crash_and_a_cut_link_on_real_hosts(tmp_path: Path) -> None:
    rc = main(["--dir", str(tmp_path / "demo"), "--step-sleep", str(STEP_SLEEP_S), "--kinds", "host-crash,partition"])
    report = json.loads((tmp_path / "demo" / "report.json").read_text())
    crash, cut = report["faults"]
    summary = json.dumps({k: report[k] for k in ("checks", "steps_lost", "weights_check")}, indent=1)
    assert rc == 0 and report["ok"], summary
    assert report["reached_target"] and report["steps_lost"] == 0 and report["weights_identical"] is True
    # The crashed host was the placer; another host took the role, and the group went elsewhere.
    assert crash["placer_before"] == crash["host"] and crash["placer_after"] not in (None, crash["host"])
    assert crash["host_after"] != crash["host"] and "lease expired" in crash["detected_as"]
    # The cut-off host killed its own trainer before the group started elsewhere; that trainer never
    # committed again.
    assert cut["fenced"] and cut["stale_commits"] == [] and cut["host_after"] != cut["host"]
    assert "fencing: lease not renewed" in cut["detected_as"]
