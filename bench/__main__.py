"""`make bench`: every benchmark in one run, sized to finish in under 20 minutes on a 2-core machine.

    python -m bench [--quick] [--steps N | --train-s 30] [--mtbf 10,20] [--reps 2] [--skip goodput,overhead,...]

1. goodput + recovery: lamplighter vs. checkpoint-restart vs. the 10-s poll
   runner, fault-free and under fault schedules (bench.goodput), plus one
   node-crash and one Lighthouse-loss run per applicable strategy
   (bench.recovery). One Slurm test cluster for all of it.
2. overhead: torchft vs. plain DDP per-step time for three model sizes.
3. Lighthouse quorum time for 2..64 groups (bench.lighthouse_quorum).
4. GPU probe cost for 8 simulated GPUs (bench/gpu_probe_cost.py) and the
   node daemon's cost (bench/daemon_cost.py) when that benchmark exists.
Results: bench/results/*.json and *.png; the ratio table: bench/results/ratios.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.jobspec import BUILD, REPO, Workload
from bench.results_io import RESULTS, uncommitted_changes, write_result

PARTS = ("goodput", "overhead", "quorum", "gpu-probe", "daemon", "heal")


def log(msg: str) -> None:
    print(msg, flush=True)


def run_goodput(args: argparse.Namespace) -> None:
    from bench.goodput import Bench, run_all
    from bench.lamplighter_slurm import available as lamplighter_slurm_available
    from bench.recovery import SCENARIOS, run_scenarios
    from bench.summarize import write_all
    from lamplighter.lab.testcluster import TestCluster, slurm_installed

    missing = slurm_installed()
    if missing:
        raise SystemExit(f"bench: Slurm is needed for the baselines: {missing}")
    mtbfs = [float(x) for x in args.mtbf.split(",")]
    mode = args.lamplighter
    if mode == "auto":
        why = lamplighter_slurm_available()
        mode = "local" if why else "slurm"
        log(f"[bench] lamplighter runs {'in local mode: ' + why if why else 'on Slurm with its node daemons'}")
    cluster = TestCluster(BUILD / "cluster", nodes=4)
    cluster.up()
    try:
        steps = args.steps or 100
        w = Workload(steps=steps)
        rows = run_all(
            w,
            mtbfs,
            args.reps,
            args.kinds.split(","),
            cluster,
            sys.executable,
            log,
            mode,
            calibrate_s=None if args.steps else args.train_s,
        )
        steps = max(r["run"]["target_steps"] for r in rows)
        if not args.no_scenarios:
            # Long enough that every recovery fits; the Slurm runs stop once the failed replica commits again.
            scen = Bench(Workload(steps=steps), cluster, BUILD / "runs", sys.executable, mode)
            rows += run_scenarios(scen, list(SCENARIOS), timeout_s=40.0, log=log)
    finally:
        cluster.down()
    targets = sorted({r["run"]["target_steps"] for r in rows if not r["run"]["extra"].get("scenario")})
    lines = write_all(
        rows,
        {
            "workload": {**w.__dict__, "steps": targets},
            "steps_calibrated": not args.steps,
            "lamplighter_mode": mode,
            "mtbf_s": mtbfs,
            "reps": args.reps,
            "kinds": args.kinds,
            "fault_start_after_s": 3.0,
        },
    )
    (RESULTS / "ratios.md").write_text("\n".join(lines) + "\n")
    log("\n".join(lines))


def run_script(name: str, argv: list[str], timeout_s: float) -> dict[str, object] | None:
    """A benchmark script that prints one JSON object as its last line."""
    try:
        out = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log(f"[{name}] timed out after {timeout_s:.0f} s")
        return None
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        log(f"[{name}] failed ({out.returncode}): {out.stderr[-600:]}")
        return None
    return dict(json.loads(lines[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one repetition, one MTBF, short runs (a smoke test)")
    ap.add_argument("--steps", type=int, default=0, help="target step of every run (default: calibrated)")
    ap.add_argument("--train-s", type=float, default=20.0, help="fault-free training time the calibration aims at")
    ap.add_argument("--mtbf", default="8,16", help="MTBFs in seconds (runs take ~20 s of fault-free training)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--kinds", default="kill,hang", help="fault kinds of the goodput schedules")
    ap.add_argument(
        "--lamplighter",
        choices=("auto", "slurm", "local"),
        default="auto",
        help="lamplighter's arm: on Slurm with its node daemons (auto: when installed), or local mode",
    )
    ap.add_argument("--no-scenarios", action="store_true", help="skip the node-crash and Lighthouse-loss runs")
    ap.add_argument("--skip", default="", help=f"comma-separated parts to skip: {', '.join(PARTS)}")
    ap.add_argument(
        "--allow-dirty", action="store_true", help="run with uncommitted changes (the results then say which)"
    )
    args = ap.parse_args(argv)
    dirty = uncommitted_changes()
    if dirty and not args.allow_dirty:
        # Every result file is stamped with the commit: numbers from other code would carry its name.
        log(f"[bench] refusing: uncommitted changes in {', '.join(dirty)} (commit them, or --allow-dirty)")
        return 2
    if args.quick:
        args.train_s, args.mtbf, args.reps = 12.0, "10", 1
    skip = set(filter(None, args.skip.split(",")))
    t0 = time.monotonic()
    if "goodput" not in skip:
        run_goodput(args)
        log(f"[bench] goodput and recovery done at {time.monotonic() - t0:.0f} s")
    if "overhead" not in skip:
        from bench.overhead import measure

        write_result("overhead", measure(1 if args.quick else 2, log=log))
        log(f"[bench] overhead done at {time.monotonic() - t0:.0f} s")
    if "quorum" not in skip:
        # A subprocess: the Lighthouse logs every quorum request to the terminal.
        BUILD.mkdir(parents=True, exist_ok=True)
        with open(BUILD / "quorum.log", "wb") as out:
            subprocess.run(
                [sys.executable, "-m", "bench.lighthouse_quorum", "--repeat", "2" if args.quick else "3"],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=300,
                check=False,
            )
        log(f"[bench] Lighthouse quorum done at {time.monotonic() - t0:.0f} s (log: {BUILD / 'quorum.log'})")
    if "gpu-probe" not in skip:
        res = run_script("gpu-probe", ["bench/gpu_probe_cost.py", "--gpus", "8", "--cycles", "50"], 300)
        if res is not None:
            write_result("gpu_probe_cost", res)
    if "daemon" not in skip and (Path(__file__).parent / "daemon_cost.py").exists():
        try:
            subprocess.run([sys.executable, "-m", "bench.daemon_cost"], cwd=REPO, timeout=240, check=False)
        except subprocess.TimeoutExpired:
            log("[daemon] timed out after 240 s")
    if "heal" not in skip:
        # Heal bandwidth per checkpoint transport, 10 MB..4 GB (bench/heal_bandwidth.py, ~6 min; progress on stderr).
        heal = ["--sizes", "10MB,100MB,1GB", "--reps", "1"] if args.quick else []
        try:
            subprocess.run([sys.executable, "-m", "bench.heal_bandwidth", *heal], cwd=REPO, timeout=1800, check=False)
        except subprocess.TimeoutExpired:
            log("[heal] timed out after 1800 s")
        log(f"[bench] heal bandwidth done at {time.monotonic() - t0:.0f} s")
    log(f"[bench] all done in {time.monotonic() - t0:.0f} s; results in {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
