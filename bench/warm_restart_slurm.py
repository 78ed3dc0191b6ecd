"""On Slurm, a killed trainer to its group's next commit: the in-job spare, an in-job cold restart, a requeue.

    python -m bench.warm_restart_slurm [--reps 1] [--kills 4] [--gap 10] [--arms spare,cold,requeue]

One Slurm lab (head + 4 compute nodes, `lamplighter supervise` on each). Per
repetition, one job of 2 groups per arm, one after the other, their order
rotating:
  spare    slurm.spare: each group keeps a warm spare step in its own allocation (srun --overlap, past
           `import torch`, torchft and the reference trainer); the group's in-job agent hands a killed
           trainer's place to it (restart.in_job);
  cold     the same in-job agent, no spare: the trainer step starts again cold in the allocation;
  requeue  restart.in_job 0: the job ends FAILED and the node daemon requeues it (Slurm starts it again,
           cold), as every restart was before the agent.
Each job gets the same exact schedule of kills (SIGKILL of the group's trainer processes), `--gap` s
apart, rotating over the groups, so a spare has been started again before the next kill lands.

Per fault, from chaos.jsonl (slurm/chaos/inject.py: what was seen from outside): kill -> the group's
trainer starting again (the agent's start record, or Slurm showing the requeued job RUNNING), and kill ->
the group's first commit of a newer attempt. Writes bench/results/warm_restart_slurm.json.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bench.jobspec import BUILD
from bench.results_io import environment, spread, uncommitted_changes, write_result
from lamplighter.configs.loader import load_job
from lamplighter.configs.schema import ChaosConfig, ChaosEvent, HealthConfig, RestartConfig
from lamplighter.lab.e2e_run import LabRun, lab_job_config
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab, running_lab
from lamplighter.lab.testcluster import slurm_installed
from lamplighter.slurm.chaos.runner import run_schedule
from lamplighter.slurm.submit.submission import cancel_job

ARMS = ("spare", "cold", "requeue")
TARGET_S = 1.0  # the bound: a killed trainer commits again within this of the kill, with the spare


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def schedule(kills: int, gap_s: float, groups: int) -> list[ChaosEvent]:
    return [ChaosEvent(at_s=(i + 1) * gap_s, kind="kill", group=(i + 1) % groups) for i in range(kills)]


def arm_config(cfg: dict[str, Any], arm: str, kills: int) -> dict[str, Any]:
    cfg["restart"]["in_job"] = 0 if arm == "requeue" else min(99, kills + 2)
    cfg["slurm"]["spare"] = arm == "spare"
    return cfg


def run_arm(lab: SlurmLab, work: Path, arm: str, rep: int, args: argparse.Namespace) -> dict[str, Any]:
    name = f"{arm}{rep}"
    cfg = lab_job_config(
        lab, work / name, name=name, steps=100000, groups=2, port=lab.new_job_port(), spare=arm == "spare"
    )
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(arm_config(cfg, arm, args.kills), sort_keys=False))
    run = LabRun(lab, load_job(path), path)
    run.submit()
    recs: list[dict[str, Any]] = []
    try:
        run.wait_all_committing()
        chaos = ChaosConfig(enabled=True, schedule=schedule(args.kills, args.gap, 2), mode="exact")
        for rec in run_schedule(run.ctx, chaos, recovery_timeout=120, poll=0.02):
            log(f"  {name}: {rec['event']} {rec['kind']} group {rec.get('group')}")
            recs.append(rec)
    finally:
        if run.sub is not None:
            cancel_job(run.sub, run.api)  # the schedule is over: the rest of the run measures nothing
            run.wait_end(120)
    rep_doc = run.report()
    faults = []
    for f in rep_doc["faults"]:
        t0, back, first = f.get("t_injected"), f.get("t_restarted"), f.get("t_first_commit_after")
        faults.append(
            {
                "group": f["group"],
                "in_job": f.get("in_job"),
                "how": f.get("how"),
                "kill_to_start_s": None if back is None or t0 is None else round(back - t0, 3),
                "start_to_commit_s": f.get("first_commit_after_restart_s"),
                "kill_to_commit_s": None if first is None or t0 is None else round(first - t0, 3),
            }
        )
    return {
        "arm": arm,
        "rep": rep,
        "faults": faults,
        "steps_lost": rep_doc["steps_lost"],
        "weights_identical": rep_doc["weights_identical"],
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in ARMS:
        mine = [f for r in runs if r["arm"] == arm for f in r["faults"]]
        if not mine:
            continue
        entry: dict[str, Any] = {"faults": len(mine)}
        for key in ("kill_to_start_s", "start_to_commit_s", "kill_to_commit_s"):
            got = [f[key] for f in mine if f[key] is not None]
            entry[key] = spread(got) if got else None
        entry["how"] = sorted({str(f["how"] or "requeued") for f in mine})  # no in-job start: Slurm started it
        entry["all_within_target"] = all(
            f["kill_to_commit_s"] is not None and f["kill_to_commit_s"] <= TARGET_S for f in mine
        )
        out[arm] = entry
    ratios = []
    for rep in sorted({r["rep"] for r in runs}):
        med: dict[str, float] = {}
        for r in runs:
            got = [f["kill_to_commit_s"] for f in r["faults"] if f["kill_to_commit_s"] is not None]
            if r["rep"] == rep and got:
                med[r["arm"]] = statistics.median(got)
        if "spare" in med and med.get("cold"):
            ratios.append(round(med["spare"] / med["cold"], 3))
    out["spare_over_cold_per_rep"] = ratios
    out["target_s"] = TARGET_S
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.warm_restart_slurm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--reps", type=int, default=1, help="repetitions; each runs every arm (default 1)")
    ap.add_argument("--kills", type=int, default=4, help="kills per job (default 4)")
    ap.add_argument("--gap", type=float, default=10.0, help="seconds between kills (default 10)")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"which arms (default {','.join(ARMS)})")
    ap.add_argument("--dir", type=Path, default=BUILD / "warm_restart_slurm", help="lab and runs (wiped first)")
    ap.add_argument("--out", default="warm_restart_slurm", help="result name in bench/results (default %(default)s)")
    ap.add_argument("--allow-dirty", action="store_true", help="run with uncommitted changes (the result says which)")
    args = ap.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    if not set(arms) <= set(ARMS):
        ap.error(f"--arms: known arms are {', '.join(ARMS)}")
    dirty = uncommitted_changes()
    if dirty and not args.allow_dirty:
        log(f"warm_restart_slurm: refusing: uncommitted changes in {', '.join(dirty)} (commit them, or --allow-dirty)")
        return 2
    source = environment()  # at the start: the code that ran, whatever happens to the tree meanwhile
    missing = slurm_installed()
    if missing:
        log(f"warm_restart_slurm: {missing}")
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = args.dir.resolve()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t0 = time.monotonic()
    runs: list[dict[str, Any]] = []
    with running_lab(
        root / "lab",
        LabSettings(
            compute_nodes=4,
            health=HealthConfig(hang_timeout_s=8.0, startup_timeout_s=45.0, poll_interval_s=0.5),
            restart=RestartConfig(budget_per_group=100, crash_loop_max=100),
        ),
    ) as lab:
        for rep in range(args.reps):
            order = arms[rep % len(arms) :] + arms[: rep % len(arms)]
            for arm in order:
                log(f"rep {rep + 1}/{args.reps}: {arm}")
                runs.append(run_arm(lab, root, arm, rep, args))
                r = runs[-1]
                log(f"  {arm}: kill -> first commit {[f['kill_to_commit_s'] for f in r['faults']]}")
    summary = summarize(runs)
    doc = {
        "source": source,
        "config": {"reps": args.reps, "kills": args.kills, "gap_s": args.gap, "groups": 2, "arms": arms},
        "summary": summary,
        "runs": runs,
        "wall_s": round(time.monotonic() - t0, 1),
    }
    write_result(args.out, doc)
    for arm in arms:
        s = summary.get(arm, {}).get("kill_to_commit_s")
        if s:
            log(f"{arm}: kill -> first commit median {s['median']:.2f} s [{s['min']:.2f}-{s['max']:.2f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
