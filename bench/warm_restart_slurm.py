"""On Slurm, "running again" to first commit with and without the node daemons' warm standbys, in one run.

    python -m bench.warm_restart_slurm [--reps 2] [--kills 4] [--gap 25]

One Slurm lab (head + 4 compute nodes, `lamplighter supervise` on each, one
standby per compute node, preloading torch, torch._dynamo, torchft and the
reference trainer). Per repetition, two jobs of 2 groups run one after the
other, their order rotating: warm (`slurm.standby_socket` set: each task asks
its node's daemon for a standby) and cold (unset: each task imports anew).
Each job gets the same exact schedule of kills, `--gap` s apart, rotating over
the groups, so that a node's standby has been refilled (refill_after_s 10 s,
then its imports) before the next restart can land there.

Per fault: Slurm shows the job RUNNING again (polled every 0.1 s) -> the
group's first commit after that, from the chaos report; and whether the
task's log says it ran warm or cold (and why). Writes
bench/results/warm_restart_slurm.json.
"""

from __future__ import annotations

import argparse
import re
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
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab
from lamplighter.lab.testcluster import pick_port_range, slurm_installed
from lamplighter.slurm.chaos_runner import run_schedule
from lamplighter.slurm.submission import cancel_job

WARM_LINE = re.compile(r"lamplighter warm_task: the trainer runs warm as pid \d+")
COLD_LINE = re.compile(r"lamplighter warm_task: starting cold: (.*)")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def schedule(kills: int, gap_s: float, groups: int) -> list[ChaosEvent]:
    return [ChaosEvent(at_s=(i + 1) * gap_s, kind="kill", group=(i + 1) % groups) for i in range(kills)]


def task_starts(run_dir: Path) -> dict[str, Any]:
    """How the tasks started, from their Slurm output files: warm, or cold and why."""
    warm, cold = 0, []
    for out in sorted((run_dir / "logs").glob("g*-*.out")):
        text = out.read_text(errors="replace")
        warm += len(WARM_LINE.findall(text))
        cold += COLD_LINE.findall(text)
    return {"warm": warm, "cold": len(cold), "cold_reasons": sorted(set(cold))}


def run_arm(lab: SlurmLab, work: Path, arm: str, rep: int, args: argparse.Namespace) -> dict[str, Any]:
    name = f"{arm}{rep}"
    cfg = lab_job_config(
        lab, work / name, name=name, steps=100000, groups=2, port=pick_port_range(1), standby=arm == "warm"
    )
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    run = LabRun(lab, load_job(path), path)
    run.submit()
    try:
        run.wait_all_committing()
        chaos = ChaosConfig(enabled=True, schedule=schedule(args.kills, args.gap, 2), mode="exact")
        for rec in run_schedule(run.ctx, chaos, recovery_timeout=120, poll=0.1):
            log(f"  {name}: {rec['event']} {rec['kind']} group {rec.get('group')}")
    finally:
        if run.sub is not None:
            cancel_job(run.sub, run.api)  # the schedule is over: the rest of the run measures nothing
            run.wait_end(120)
    rep_doc = run.report()
    faults = []
    for f in rep_doc["faults"]:
        first = f.get("first_commit_after_restart_s")
        faults.append(
            {
                "group": f["group"],
                "node_after": f.get("node_after"),
                "running_again_s": f.get("running_again_s"),  # from the kill
                "running_to_commit_s": first,  # the report measures it from "running again" already
            }
        )
    return {
        "arm": arm,
        "rep": rep,
        "faults": faults,
        "starts": task_starts(work / name),
        "steps_lost": rep_doc["steps_lost"],
        "weights_identical": rep_doc["weights_identical"],
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in ("cold", "warm"):
        vals = [f["running_to_commit_s"] for r in runs if r["arm"] == arm for f in r["faults"]]
        got = [v for v in vals if v is not None]
        out[arm] = {"running_to_commit_s": spread(got) if got else None, "faults": len(vals), "measured": len(got)}
    ratios = []
    for rep in sorted({r["rep"] for r in runs}):
        med: dict[str, float] = {}
        for r in runs:
            got = [f["running_to_commit_s"] for f in r["faults"] if f["running_to_commit_s"] is not None]
            if r["rep"] == rep and got:
                med[r["arm"]] = statistics.median(got)
        if "warm" in med and med.get("cold"):
            ratios.append(round(med["warm"] / med["cold"], 3))
    out["warm_over_cold_per_rep"] = ratios
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.warm_restart_slurm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--reps", type=int, default=2, help="repetitions; each runs both arms (default 2)")
    ap.add_argument("--kills", type=int, default=4, help="kills per job (default 4)")
    ap.add_argument("--gap", type=float, default=25.0, help="seconds between kills (default 25)")
    ap.add_argument("--dir", type=Path, default=BUILD / "warm_restart_slurm", help="lab and runs (wiped first)")
    ap.add_argument("--out", default="warm_restart_slurm", help="result name in bench/results (default %(default)s)")
    ap.add_argument("--allow-dirty", action="store_true", help="run with uncommitted changes (the result says which)")
    args = ap.parse_args(argv)
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
    lab = SlurmLab(
        root / "lab",
        LabSettings(
            compute_nodes=4,
            health=HealthConfig(hang_timeout_s=8.0, startup_timeout_s=45.0, poll_interval_s=0.5),
            restart=RestartConfig(budget_per_group=100, crash_loop_max=100),
            standby=1,
        ),
    )
    runs: list[dict[str, Any]] = []
    lab.up(start_daemons=True)
    try:
        lab.wait_daemons_alive()
        lab.wait_standbys_ready()
        for rep in range(args.reps):
            for arm in ("warm", "cold") if rep % 2 == 0 else ("cold", "warm"):
                log(f"rep {rep + 1}/{args.reps}: {arm}")
                runs.append(run_arm(lab, root, arm, rep, args))
                r = runs[-1]
                log(
                    f"  {arm}: running -> first commit {[f['running_to_commit_s'] for f in r['faults']]}, {r['starts']}"
                )
    finally:
        lab.down()
    summary = summarize(runs)
    doc = {
        "source": source,
        "config": {"reps": args.reps, "kills": args.kills, "gap_s": args.gap, "groups": 2, "standby_per_node": 1},
        "summary": summary,
        "runs": runs,
        "wall_s": round(time.monotonic() - t0, 1),
    }
    write_result(args.out, doc)
    for arm in ("cold", "warm"):
        s = summary[arm]["running_to_commit_s"]
        if s:
            log(f"{arm}: running again -> first commit median {s['median']:.2f} s [{s['min']:.2f}-{s['max']:.2f}]")
    log(f"warm/cold per repetition: {summary['warm_over_cold_per_rep']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
