"""SIGTERM stops `lamplighter local` as Ctrl-C does: its groups and Lighthouse end with it, and it reports.

Found by hand: `timeout 60 lamplighter local configs/demo.yaml` left the Lighthouse running for good and
the trainers training to the target with nobody watching (Python's default SIGTERM skips every finally)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from realparts import wait_for

from lamplighter.rundir import contract
from lamplighter.rundir.steplog import read_steps

JOB = """
name: term
trainer:
  steps: 100000
  model: {dim: 32, layers: 1, heads: 2, seq_len: 16, batch_size: 4}
  checkpoint: {enabled: false}
groups: {count: 2}
lighthouse: {port: 0, min_replicas: 1, quorum_tick_ms: 20, join_timeout_ms: 1000, heartbeat_timeout_ms: 500}
torchft: {pg_timeout_s: 2, timeout_s: 3, quorum_timeout_s: 4, connect_timeout_s: 10}
health: {hang_timeout_s: 10, poll_interval_s: 0.5}
restart: {budget_per_group: 5, backoff_initial_s: 0, standby: 1}
"""


def committed(run_dir: Path, group: int) -> int:
    return sum(1 for r in read_steps(contract.RunPaths(run_dir).steps(group)) if r.committed)


@pytest.mark.integration
def test_sigterm_ends_the_groups_and_the_lighthouse_and_writes_the_report(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(JOB)
    run_dir, report_dir = tmp_path / "run", tmp_path / "report"
    argv = [sys.executable, "-m", "lamplighter", "local", str(tmp_path / "job.yaml"), "--no-live"]
    argv += ["--run-dir", str(run_dir), "--report", str(report_dir)]
    with (tmp_path / "out.log").open("wb") as out:
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    tree: list[psutil.Process] = []
    try:
        wait_for(lambda: min(committed(run_dir, g) for g in (0, 1)) >= 3, 120, "both groups to commit 3 steps")
        tree = psutil.Process(p.pid).children(recursive=True)
        names = [" ".join(c.cmdline()[1:3]) for c in tree]
        assert sum("lamplighter.trainer" in n for n in names) == 2 and any("lighthouse" in n for n in names), names
        p.send_signal(signal.SIGTERM)
        assert p.wait(60) == 1, (tmp_path / "out.log").read_text()[-2000:]
        _, alive = psutil.wait_procs(tree, timeout=10)  # a bound, not a pause: they were ended before it exited
        assert not alive, [(c.pid, c.cmdline()[:3]) for c in alive]
    finally:
        for proc in [psutil.Process(p.pid), *tree] if p.poll() is None else tree:
            try:
                proc.kill()  # only what this test started, by PID
            except psutil.NoSuchProcess:
                pass
    out_text = (tmp_path / "out.log").read_text()
    assert "interrupted by SIGTERM: stopping the groups and the Lighthouse" in out_text, out_text[-2000:]
    report = json.loads((report_dir / "report.json").read_text())
    assert report["interrupted"] is True and report["reached_target"] is False and report["steps_lost"] == 0
