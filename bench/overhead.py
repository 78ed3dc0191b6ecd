"""torchft's per-step cost against plain DDP, for a few model sizes (2 replicas of 1 process, same batch).

    python -m bench.overhead [--reps 2]

torchft: the reference trainer under `lamplighter local`, fault-free.
Plain DDP: the checkpoint-restart baseline's trainer with checkpoints off
(torch DDP over gloo, no Lighthouse, no quorum). Both do the same work per
step (model, data, AdamW, state hash, step log). The figure is the median
time between two commits after a warm-up, runs interleaved, repeated; the
fixed per-step cost of torchft (a Lighthouse round trip and the quorum)
matters most for small models.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bench.jobspec import BUILD, REPO, Workload, job_config
from bench.results_io import spread, write_result
from lamplighter.configs.job_file import job_file_doc
from lamplighter.rundir import contract
from lamplighter.rundir.steplog import read_steps

WARMUP = 5
SIZES = {
    "small (dim 64, 2 layers, seq 32, batch 8)": (
        Workload(steps=40, replicas=2, dim=64, layers=2, seq_len=32, batch_size=8, step_period_s=0)
    ),
    "medium (dim 128, 2 layers, seq 64, batch 16)": (
        Workload(steps=24, replicas=2, dim=128, layers=2, seq_len=64, batch_size=16, step_period_s=0)
    ),
    "large (dim 256, 4 layers, seq 128, batch 16)": (
        Workload(steps=11, replicas=2, dim=256, layers=4, seq_len=128, batch_size=16, step_period_s=0)
    ),
}


def step_time(run_dir: Path) -> float | None:
    ts = sorted(r.t for r in read_steps(run_dir / "steps" / "0.jsonl") if r.committed)[WARMUP:]
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    return statistics.median(gaps) if gaps else None


def run_ddp(w: Workload, run_dir: Path, timeout_s: float = 300.0) -> float | None:
    job = job_config("ovh-ddp", run_dir, w, run_id="overhead")
    run_dir.mkdir(parents=True, exist_ok=True)
    contract.write_json_atomic(run_dir / "job.json", job_file_doc(job))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(w.replicas):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE=str(w.replicas),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
            PYTHONPATH=str(REPO),
        )
        with open(run_dir / f"rank{rank}.log", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "bench.baselines.ckpt_trainer",
                        "--config",
                        str(run_dir / "job.json"),
                        "--no-checkpoint",
                    ],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                )
            )
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return step_time(run_dir)


def run_torchft(w: Workload, run_dir: Path, timeout_s: float = 300.0) -> float | None:
    """The same job under `lamplighter local`, fault-free, to its step target."""
    job = job_config("ovh-ft", run_dir, w, run_id="overhead")
    cfg = run_dir.parent / f"{run_dir.name}.yaml"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(yaml.safe_dump(job.model_dump(mode="json", exclude={"slurm"})))
    argv = [sys.executable, "-m", "lamplighter", "local", str(cfg), "--chaos", "off", "--run-dir", str(run_dir)]
    argv += ["--report", str(run_dir.parent / f"{run_dir.name}.report"), "--no-live"]
    with open(run_dir.parent / f"{run_dir.name}.log", "wb") as log:
        subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout_s)
    return step_time(run_dir)


def measure(reps: int, log: Any = print) -> dict[str, Any]:
    root = BUILD / "overhead"
    shutil.rmtree(root, ignore_errors=True)
    rows = []
    for name, w in SIZES.items():
        ddp: list[float] = []
        ft: list[float] = []
        for rep in range(reps):
            # Alternate which goes first: the machine's load drifts.
            order = ("ddp", "ft") if rep % 2 == 0 else ("ft", "ddp")
            for which in order:
                d = root / f"{which}-{w.dim}-{rep}"
                t = run_ddp(w, d) if which == "ddp" else run_torchft(w, d)
                if t is not None:
                    (ddp if which == "ddp" else ft).append(t)
        ratios = [a / b for a, b in zip(ddp, ft, strict=False)]
        row = {
            "model": name,
            "workload": w.__dict__,
            "ddp_step_s": spread(ddp) if ddp else None,
            "torchft_step_s": spread(ft) if ft else None,
            "torchft_throughput_vs_ddp": spread(ratios) if ratios else None,
            "torchft_extra_ms_per_step": spread([(b - a) * 1000 for a, b in zip(ddp, ft, strict=False)])
            if ratios
            else None,
        }
        rows.append(row)
        log(f"[overhead] {name}: ddp {ddp} ft {ft} throughput ratio {row['torchft_throughput_vs_ddp']}")
    return {"rows": rows, "reps": reps, "warmup_steps": WARMUP}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args(argv)
    write_result("overhead", measure(args.reps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
