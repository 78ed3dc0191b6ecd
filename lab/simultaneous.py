"""Survivors' stall when most groups fail at the same instant, on the Slurm lab (issue #16).

One 3-group job; two exact pairs of faults at the same planned time: two
groups killed, then (40 s later) a GPU fault on one group and a node crash
on another. For each fault it prints and writes the survivors' stall (the
report's survivor_stall_s: the surviving group's longest extra gap between
commits), detection and back-to-commit, to <dir>/report.json.

    python -m lamplighter.lab.simultaneous [--dir build/simultaneous]
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
from pathlib import Path

import yaml

from lamplighter.configs.loader import load_job
from lamplighter.configs.schema import ChaosConfig, ChaosEvent, HealthConfig, RestartConfig
from lamplighter.lab.e2e_run import LabRun, lab_job_config
from lamplighter.lab.slurm_lab import LabSettings, running_lab
from lamplighter.lab.source_stamp import source_stamp
from lamplighter.lab.testcluster import slurm_installed
from lamplighter.slurm.chaos.runner import run_schedule

SCHEDULE = [
    ChaosEvent(at_s=3, kind="kill", group=1),
    ChaosEvent(at_s=3, kind="kill", group=2),
    ChaosEvent(at_s=40, kind="gpu", group=0),
    ChaosEvent(at_s=40, kind="node-crash", group=2),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lamplighter.lab.simultaneous",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--dir", type=Path, default=Path("build/simultaneous"), help="lab and report (wiped first)")
    ap.add_argument("--steps", type=int, default=1500)
    args = ap.parse_args(argv)
    missing = slurm_installed()
    if missing:
        print(f"simultaneous: {missing}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = args.dir.resolve()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    source = source_stamp()  # at the start: the code that ran, whatever happens to the tree meanwhile
    with running_lab(
        root / "lab",
        LabSettings(
            compute_nodes=6,
            health=HealthConfig(hang_timeout_s=8.0, startup_timeout_s=45.0, poll_interval_s=0.5),
            restart=RestartConfig(budget_per_group=100, crash_loop_max=100),
        ),
    ) as lab:
        cfg = lab_job_config(lab, root / "run", name="simul", steps=args.steps, groups=3, port=lab.job_port)
        cfg["trainer"]["checkpoint"] = {"enabled": True, "interval_s": 10}
        path = root / "job.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        run = LabRun(lab, load_job(path), path)
        run.submit()
        run.wait_all_committing()
        chaos = ChaosConfig(enabled=True, schedule=SCHEDULE, mode="exact")
        for rec in run_schedule(run.ctx, chaos, recovery_timeout=120, poll=0.1):
            print(f"{rec['event']} {rec['kind']} group {rec.get('group')}", flush=True)
        states = run.wait_end(900)
        rep = run.report()
        keys = ("kind", "group", "t_injected", "survivor_stall_s", "detection_latency_s", "recovery_s")
        out = {
            "source": source,
            "faults": [{k: f[k] for k in keys} for f in rep["faults"]],
            "steps_lost": rep["steps_lost"],
            "weights_identical": rep["weights_identical"],
            "slurm_end_states": {str(k): v for k, v in states.items()},
        }
        (root / "report.json").write_text(json.dumps(out, indent=2))
        for f in out["faults"]:
            print(
                f"{f['kind']:<11} group {f['group']}: survivors' stall {f['survivor_stall_s']} s, "
                f"detected {f['detection_latency_s']} s, back to commit {f['recovery_s']} s"
            )
        print(f"lost {out['steps_lost']}, weights identical {out['weights_identical']}, {out['slurm_end_states']}")
        return 0 if out["steps_lost"] == 0 and out["weights_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
