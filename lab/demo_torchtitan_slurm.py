"""The real torchtitan 0.3 on the Slurm lab, with the node daemons: a kill, a hang, a GPU fault, a node crash.

    python -m lamplighter.lab.demo_torchtitan_slurm [--dir build/demo-torchtitan-slurm] [--mode per-step]
        [--kinds kill,hang,gpu,node-crash] [--steps 220]

The job of `make demo-torchtitan` (demo_torchtitan.py: 3 groups of one torchrun with one CPU worker each, the
lab's torchtitan environment, state hash on), submitted with `lamplighter submit` to the test cluster (head +
6 compute nodes, simulated GPUs, a node daemon on each). Faults one at a time, each once its group commits
again, as `make demo-slurm` does. Writes report.json in --dir (the lab's report: steps, losses, hashes, each
fault's detection, restart and first commit, Slurm's end states, the drained nodes) and exits 0 when the run
is OK, every job ended COMPLETED and only the GPU-faulted node is drained.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

from lamplighter.configs.loader import load_job
from lamplighter.configs.schema import HealthConfig, RestartConfig
from lamplighter.lab.demo_torchtitan import CONFIGS, MODES, titan_trainer
from lamplighter.lab.e2e_run import LabRun, bring_back, drained_nodes, lab_job_config, per_kind_lines
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab, running_lab
from lamplighter.lab.source_stamp import source_stamp
from lamplighter.lab.testcluster import slurm_installed
from lamplighter.lab.torchtitan_env import DEFAULT_DIR, ensure
from lamplighter.report.build import run_ok

DEFAULT_KINDS = ("kill", "hang", "gpu", "node-crash")


def titan_lab_job(
    lab: SlurmLab, run_dir: Path, *, mode: str, env_dir: Path, steps: int, groups: int, port: int
) -> dict[str, Any]:
    cfg = lab_job_config(lab, run_dir, name=f"titan-{mode}", steps=steps, groups=groups, port=port)
    cfg["trainer"] = titan_trainer(mode, ensure(env_dir), steps)
    cfg["torchft"] = dict(MODES[mode].torchft)
    # 2 of 3 (demo_torchtitan.py says why); with 2 groups the survivor must train on alone.
    cfg["lighthouse"].update(
        {"min_replicas": 2 if groups >= 3 else 1, "heartbeat_timeout_ms": 1000, "join_timeout_ms": 1000}
    )
    return cfg


def lab_settings(compute_nodes: int, mode: str = "per-step") -> LabSettings:
    """The job's health settings are the lab's (lab_job_config copies them): the mode's, polled every 0.5 s."""
    return LabSettings(
        compute_nodes=compute_nodes,
        health=HealthConfig.model_validate({**MODES[mode].health, "poll_interval_s": 0.5}),
        restart=RestartConfig(budget_per_group=10, crash_loop_max=10),
    )


def verdict(
    report: dict[str, Any], states: dict[int, str], drained: dict[str, str | None], gpu_node: str | None
) -> list[str]:
    wrong = []
    if not run_ok(report):
        wrong.append(
            f"run: target {report['reached_target']}, lost {report['steps_lost']}, identical {report['weights_identical']}"
        )
    if set(states.values()) != {"COMPLETED"}:
        wrong.append(f"Slurm end states {states}")
    expected = {gpu_node} if gpu_node else set()
    if set(drained) != expected:
        wrong.append(f"drained {sorted(drained)}, expected {sorted(expected)}")
    wrong += [f"{f['kind']} never recovered" for f in report["faults"] if f.get("t_first_commit_after") is None]
    return wrong


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lamplighter.lab.demo_torchtitan_slurm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--dir", type=Path, default=Path("build/demo-torchtitan-slurm"), help="lab folder (wiped first)")
    ap.add_argument("--env", type=Path, default=DEFAULT_DIR, help="the torchtitan environment (built if missing)")
    ap.add_argument("--mode", default="per-step", choices=sorted(CONFIGS))
    ap.add_argument("--kinds", default=",".join(DEFAULT_KINDS))
    ap.add_argument("--steps", type=int, default=220)
    ap.add_argument("--groups", type=int, default=3)
    args = ap.parse_args(argv)
    missing = slurm_installed()
    if missing:
        print(f"demo-torchtitan-slurm: {missing}", file=sys.stderr)
        return 2
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    source = source_stamp()
    ensure(args.env)
    root = args.dir.resolve()
    shutil.rmtree(root, ignore_errors=True)
    print(f"starting the lab under {root} ...", flush=True)
    with running_lab(root / "lab", lab_settings(6, args.mode)) as lab:
        cfg = titan_lab_job(
            lab,
            root / "titan",
            mode=args.mode,
            env_dir=args.env,
            steps=args.steps,
            groups=args.groups,
            port=lab.job_port,
        )
        path = root / "titan.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        run = LabRun(lab, load_job(path), path)
        sub = run.submit()
        print(f"submitted: groups {sub.groups}; waiting for every group to commit ...", flush=True)
        run.wait_all_committing(timeout=300)
        gpu_node: str | None = None
        for i, kind in enumerate(kinds):
            group, node = run.group_on_node(exclude={gpu_node} if gpu_node else None, prefer=i % args.groups)
            out = run.fault(kind, group, recovery_timeout=300)
            print(
                json.dumps({k: out.recovered.get(k) for k in ("kind", "group", "node_after", "t_first_commit")}),
                flush=True,
            )
            if kind == "gpu":
                gpu_node = node
            if kind == "node-crash":
                bring_back(run, lab, node)
        drained = drained_nodes(run)
        states = run.wait_end(900)
        report = run.report(
            extra={
                "mode": args.mode,
                "drained_nodes": drained,
                "slurm_end_states": {str(k): v for k, v in states.items()},
                "source": source,
            }
        )
        wrong = verdict(report, states, drained, gpu_node)
        report["problems"] = wrong
        (root / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        print("\n".join(per_kind_lines(report)))
        print(
            f"{'OK' if not wrong else 'FAILED: ' + '; '.join(wrong)}: steps {report['steps_committed']}/"
            f"{report['target_steps']} (torchtitan's count {report.get('trainer_steps')}), lost {report['steps_lost']}, "
            f"weights identical {report['weights_identical']} ({report['weights_check']}), drained {drained or 'none'}"
        )
        return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
