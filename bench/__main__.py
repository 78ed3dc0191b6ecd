"""`make bench`: the benchmark that decides; `make bench-costs`: what lamplighter costs.

    python -m bench [--quick] [--reps 5] [--mtbf 4] [--train-s 60] [--free-s 15]   # make bench
    python -m bench --costs                                                        # make bench-costs
    python -m bench --big-state 1024                                               # make bench-big

The deciding part (about 30 minutes on 2 cores): lamplighter against
checkpoint-restart and the 10-s poll runner, fault-free and under one fault
schedule per repetition (bench.goodput), one node-crash and one
Lighthouse-loss run per applicable strategy (bench.recovery), and the goodput
model's check against those runs (bench.model_check). One Slurm test cluster
for the baselines, a fresh lab with lamplighter's node daemons per lamplighter run.

The big-state arm (`--big-state MB`): the same runs of lamplighter and
checkpoint-restart only, every replica holding MB more state (heals send it,
checkpoints write and read it): goodput_big.json, ratios_big.md.

The costs (`--costs`, about 12 minutes): torchft against plain DDP per step,
Lighthouse quorum time for 2..64 groups, the GPU check's and the node
daemon's cost, heal bandwidth per transport for 10 MB..4 GB.

Results: bench/results/*.json and *.png, each stamped with the commit; the
ratio table: bench/results/ratios.md.
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

DECIDING = ("goodput",)
COSTS = ("overhead", "quorum", "gpu-probe", "daemon", "heal")
PARTS = DECIDING + COSTS


def log(msg: str) -> None:
    print(msg, flush=True)


def run_goodput(args: argparse.Namespace) -> None:
    from bench.goodput import STRATEGIES, Bench, run_all
    from bench.lamplighter_slurm import available as lamplighter_slurm_available
    from bench.recovery import SCENARIOS, run_scenarios
    from bench.summarize import write_all
    from lamplighter.lab.testcluster import TestCluster, slurm_installed

    suffix = "_big" if args.big_state else ""
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
        w = Workload(steps=steps, state_pad_mb=args.big_state)
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
            free_share=args.free_s / args.train_s,
            time_limit=args.time_limit,
            # The big-state arm asks one question: lamplighter against checkpoints of that size.
            strategies=("lamplighter", "ckpt-restart") if args.big_state else STRATEGIES,
        )
        steps = max(r["run"]["target_steps"] for r in rows)
        if not args.no_scenarios and not args.big_state:
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
            "fault_free_share_of_target": round(args.free_s / args.train_s, 3),
            "faulted_time_limit_x_fault_free": args.time_limit,
            "fault_start_after_s": 3.0,
            "state_pad_mb": args.big_state,
        },
        suffix=suffix,
    )
    (RESULTS / f"ratios{suffix}.md").write_text("\n".join(lines) + "\n")
    log("\n".join(lines))
    if args.big_state:
        return  # the model check reads the small-state runs
    from bench.model_check import main as model_check

    try:
        model_check()
    except (KeyError, ValueError, ZeroDivisionError) as e:
        # The runs' results are written already; the check is a reading of them.
        log(f"[model-check] failed: {type(e).__name__}: {e}")


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
    ap.add_argument(
        "--train-s",
        type=float,
        default=60.0,
        help="fault-free training time of the faulted runs' target (calibrated per repetition; the faulted runs take longer)",
    )
    ap.add_argument(
        "--free-s",
        type=float,
        default=15.0,
        help="fault-free training time of the fault-free runs (they measure a rate)",
    )
    ap.add_argument(
        "--mtbf",
        default="4",
        help="MTBFs in seconds, comma-separated (default 4: about one recovery, so the runs see 10 or more faults)",
    )
    ap.add_argument(
        "--time-limit",
        type=float,
        default=1.4,
        help="a faulted run stops at its target or at this multiple of its fault-free time, whichever is first",
    )
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--kinds", default="kill,hang", help="fault kinds of the goodput schedules")
    ap.add_argument(
        "--lamplighter",
        choices=("auto", "slurm", "local"),
        default="auto",
        help="lamplighter's arm: on Slurm with its node daemons (auto: when installed), or local mode",
    )
    ap.add_argument("--no-scenarios", action="store_true", help="skip the node-crash and Lighthouse-loss runs")
    ap.add_argument(
        "--big-state",
        type=int,
        default=0,
        metavar="MB",
        help="the big-state arm (make bench-big: 1024): every replica holds MB more state, which lamplighter's heals "
        "send and checkpoint-restart writes into every checkpoint; lamplighter and ckpt-restart only; "
        "results in goodput_big.json",
    )
    ap.add_argument("--costs", action="store_true", help=f"run the cost benchmarks ({', '.join(COSTS)}) instead")
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
        args.train_s, args.free_s, args.mtbf, args.reps = 12.0, 12.0, "4", 1
    skip = set(filter(None, args.skip.split(","))) | set(DECIDING if args.costs else COSTS)
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
