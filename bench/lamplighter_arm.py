"""lamplighter's arm: `lamplighter local` (bare metal, supervised, the same trainer), fed the same fault schedule.

The schedule goes in as an explicit chaos file (times, kinds, the seed that
picks targets), so lamplighter's injector fires exactly what the Slurm
driver fires for the baselines. Detection, restart and first-commit times
come from lamplighter's own report.json; process starts from its decisions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from bench.runrecord import Fault, RunRecord
from lamplighter.configs.schema import JobConfig
from lamplighter.supervisor.chaos import PlannedFault
from lamplighter.trainer.steplog import read_steps


def run_local(
    job: JobConfig,
    planned: list[PlannedFault],
    *,
    seed: int,
    timeout_s: float,
    mtbf_s: float | None,
    rep: int,
    python: str = sys.executable,
) -> RunRecord:
    assert job.run_dir is not None
    run_dir = Path(job.run_dir)
    base = run_dir.parent / f"{run_dir.name}.in"
    base.mkdir(parents=True, exist_ok=True)
    cfg_path = base / "job.yaml"
    cfg_path.write_text(yaml.safe_dump(job.model_dump(mode="json", exclude={"slurm"})))
    if planned:
        chaos = base / "chaos.yaml"
        chaos.write_text(
            yaml.safe_dump(
                {"seed": seed, "start_after_s": 0, "schedule": [{"at_s": f.at_s, "kind": f.kind} for f in planned]}
            )
        )
        chaos_arg = f"@{chaos}"
    else:
        chaos_arg = "off"
    report_dir = base / "report"
    argv = [
        python,
        "-m",
        "lamplighter",
        "local",
        str(cfg_path),
        "--chaos",
        chaos_arg,
        "--run-dir",
        str(run_dir),
        "--report",
        str(report_dir),
        "--no-live",
    ]
    t_start = time.time()
    with open(base / "local.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.terminate()  # local mode stops its groups and the Lighthouse on SIGTERM/SIGINT
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    t_end = time.time()
    report = json.loads((report_dir / "report.json").read_text()) if (report_dir / "report.json").exists() else {}
    n = job.groups.count
    steps = {g: read_steps(run_dir / "steps" / f"{g}.jsonl") for g in range(n)}
    faults = [
        Fault(
            kind=f["kind"],
            index=f.get("group"),
            t_injected=f["t_injected"],
            t_detected=f.get("t_detected"),
            t_restarted=f.get("t_restarted"),
        )
        for f in report.get("faults", [])
        if f.get("kind") != "unplanned"
    ]
    starts: dict[int, list[float]] = {g: [] for g in range(n)}
    for d in report.get("decisions", []):
        if d.get("action") == "restart" and d.get("group") is not None:
            starts[int(d["group"])].append(float(d["t"]))
    reached = max((r.step for rs in steps.values() for r in rs if r.committed), default=0) >= job.trainer.steps
    return RunRecord(
        strategy="lamplighter",
        mtbf_s=mtbf_s,
        rep=rep,
        seed=seed,
        target_steps=job.trainer.steps,
        replicas=n,
        t_start=t_start,
        t_end=t_end,
        reached=reached,
        substrate="local",
        faults=faults,
        starts=starts,
        steps=steps,
        extra={
            "exit_code": proc.returncode,
            # The schedule's faults never fired: due within the run, or after its end.
            "faults_not_injected": None
            if "chaos_not_injected" not in report
            else report["chaos_not_injected"] + (report.get("chaos_after_end") or 0),
            "steps_lost_by_report": report.get("steps_lost"),
            "weights_identical": report.get("weights_identical"),
        },
    )
