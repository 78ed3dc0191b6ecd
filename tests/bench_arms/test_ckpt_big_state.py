"""The checkpoint-restart baseline in the big-state arm: its checkpoints carry the extra state and a restart
reads it back, so the benchmark charges it for writing and reading that much; the interval is measured once per
job (a real gloo process group of one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from lamplighter.system.ports import free_port

REPO = Path(__file__).resolve().parents[2]
PAD_MB = 3


def run_trainer(config: Path, steps: int) -> subprocess.CompletedProcess[str]:
    job = json.loads(config.read_text())
    job["trainer"]["steps"] = steps
    config.write_text(json.dumps(job))
    env = {
        **os.environ,
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-m", "bench.baselines.ckpt_trainer", "--config", str(config), "--mtbf-s", "0.01"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.integration
def test_checkpoints_carry_the_extra_state_and_a_restart_reads_it(tmp_path: Path, bench: ModuleType) -> None:
    pytest.importorskip("torch")
    import torch

    from bench.jobspec import Workload, job_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    job = job_config("b-big", run_dir, Workload(steps=4, state_pad_mb=PAD_MB, step_period_s=0.0), run_id="t")
    config = tmp_path / "job.json"
    config.write_text(json.dumps(job.model_dump(mode="json")))

    first = run_trainer(config, 8)
    assert first.returncode == 0, first.stderr[-2000:]
    ckpt = torch.load(run_dir / "ckpt.pt", weights_only=False)
    assert ckpt["pad"].numel() == PAD_MB * 2**20
    assert (run_dir / "ckpt.pt").stat().st_size > PAD_MB * 2**20
    written = int(ckpt["step"])
    assert 5 <= written < 8  # measured at step 5; at MTBF 0.01 s, K is 1 step

    second = run_trainer(config, 10)
    assert second.returncode == 0, second.stderr[-2000:]
    events = [json.loads(line) for line in (run_dir / "ckpt_log.jsonl").read_text().splitlines()]
    loads = [e for e in events if e["event"] == "load"]
    assert [e["step"] for e in loads] == [written]
    intervals = [e for e in events if e["event"] == "interval"]
    assert len(intervals) == 1 and intervals[0]["k_steps"] == 1  # the restart reused it
    assert [e["step"] for e in events if e["event"] == "checkpoint"][-2:] == [8, 9]
