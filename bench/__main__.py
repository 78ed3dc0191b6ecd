"""`make bench`: every result file of the benchmark, from one run at one commit.

    python -m bench                       # make bench: everything below, about 30 minutes on 2 cores
    python -m bench --only heal,overhead  # some parts (their files then come from this run's commit)
    python -m bench --quick               # a smoke run: one short repetition of everything

Parts, in the order they run (each writes bench/results/<file>; a part that fails is reported and the
run goes on, exiting 1 at the end):
  goodput     lamplighter, checkpoint-restart and the 10-s poll runner under one fault schedule per
              repetition, and fault-free (bench.goodput): goodput.json, recovery.json, ratios.md
  big         the same for lamplighter and checkpoint-restart when every replica holds 1 GB more state
              (heals send it, checkpoints write and read it): goodput_big.json, ratios_big.md
  model       the goodput model's prediction for the goodput runs (bench.model_check): model_check.json;
              its projection from 64 to 16k GPUs (lamplighter plan --plot): plan_sweep.png
  warm        restart to first commit with and without a warm standby, local mode: warm_restart.json
  warm-slurm  kill to first commit on Slurm: in-job spare, in-job cold, requeue: warm_restart_slurm.json
  overhead    torchft's per-step cost against plain DDP: overhead.json
  quorum      Lighthouse quorum time for 2..64 groups: lighthouse_quorum.json
  gpu-probe   the GPU check's cost: gpu_probe_cost.json
  daemon      the node daemon's cost: daemon_cost.json
  heal        heal bandwidth per transport, 10 MB..4 GB: heal_bandwidth.json

Every file's environment carries the same `bench_run` (the commit and the start time); the run
refuses uncommitted changes to tracked files, and bench_run.json records each part's time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bench.jobspec import BUILD, REPO, Workload
from bench.results_io import ENV_BENCH_RUN, RESULTS, environment, uncommitted_changes, write_result

PARTS = ("goodput", "big", "model", "warm", "warm-slurm", "overhead", "quorum", "gpu-probe", "daemon", "heal")


def log(msg: str) -> None:
    print(msg, flush=True)


def run_goodput(args: argparse.Namespace, big_mb: int) -> None:
    from bench.goodput import STRATEGIES, Bench, run_all
    from bench.lamplighter_slurm import available as lamplighter_slurm_available
    from bench.recovery import SCENARIOS, run_scenarios
    from bench.summarize import write_all
    from lamplighter.lab.testcluster import TestCluster, slurm_installed

    suffix = "_big" if big_mb else ""
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
        w = Workload(steps=args.steps or 100, replicas=args.replicas, state_pad_mb=big_mb, standbys=args.standbys)
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
            strategies=("lamplighter", "ckpt-restart") if big_mb else STRATEGIES,
        )
        steps = max(r["run"]["target_steps"] for r in rows)
        if args.scenarios and not big_mb:
            # Long enough that every recovery fits; the Slurm runs stop once the failed replica commits again.
            scen = Bench(
                Workload(steps=steps, replicas=args.replicas, standbys=args.standbys),
                cluster,
                BUILD / "runs",
                sys.executable,
                mode,
            )
            try:
                rows += run_scenarios(scen, list(SCENARIOS), timeout_s=40.0, log=log)
            finally:
                scen.close()
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
            "state_pad_mb": big_mb,
        },
        suffix=suffix,
    )
    (RESULTS / f"ratios{suffix}.md").write_text("\n".join(lines) + "\n")
    log("\n".join(lines))


def run_module(name: str, argv: list[str], timeout_s: float, out: Path | None = None) -> None:
    """A benchmark module in its own process (they print progress, and some start servers that log a lot)."""
    BUILD.mkdir(parents=True, exist_ok=True)
    log_path = out or BUILD / f"{name}.log"
    with open(log_path, "wb") as f:
        try:
            rc = subprocess.run(
                [sys.executable, "-m", name, *argv],
                cwd=REPO,
                stdout=f,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"{name} timed out after {timeout_s:.0f} s (log: {log_path})") from e
    if rc != 0:
        tail = log_path.read_text(errors="replace")[-800:]
        raise RuntimeError(f"{name} exited {rc} (log: {log_path}):\n{tail}")


def run_json_script(name: str, argv: list[str], timeout_s: float) -> None:
    """A benchmark script that prints one JSON object as its last line."""
    out = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{argv[0]} exited {out.returncode}: {out.stderr[-600:]}")
    write_result(name, dict(json.loads(lines[-1])))


def run_model_check() -> None:
    from bench.model_check import main as model_check

    if model_check() != 0:
        raise RuntimeError("the model check found no run to check")
    # The model's projection from 64 to 16k GPUs (its defaults, nothing measured): the plot the issue asks for.
    plot = RESULTS / "plan_sweep.png"
    subprocess.run([sys.executable, "-m", "lamplighter", "plan", "--plot", str(plot)], check=True, timeout=300)


def run_overhead() -> None:
    from bench.overhead import measure

    write_result("overhead", measure(1, log=log))


def parts(args: argparse.Namespace) -> dict[str, Callable[[], None]]:
    q = args.quick
    return {
        "goodput": lambda: run_goodput(args, 0),
        "big": lambda: run_goodput(args, args.big_state),
        "model": run_model_check,
        "warm": lambda: run_module(
            "bench.warm_restart",
            # 360 steps (~48 s here) outlast the last kill at 28 s and its recovery, with room for a faster machine.
            ["--reps", "1", "--kills", "2" if q else "4", "--gap", "7", "--steps", "360"],
            600,
            BUILD / "warm_restart.log",
        ),
        "warm-slurm": lambda: run_module(
            "bench.warm_restart_slurm",
            # The tree was checked once, at the start; by now it holds this run's own results.
            ["--reps", "1", "--kills", "2" if q else "4", "--gap", "10", "--allow-dirty"],
            900,
        ),
        "overhead": run_overhead,
        "quorum": lambda: run_module("bench.lighthouse_quorum", ["--repeat", "2" if q else "3"], 300),
        "gpu-probe": lambda: run_json_script(
            "gpu_probe_cost", ["bench/gpu_probe_cost.py", "--gpus", "8", "--cycles", "50"], 300
        ),
        "daemon": lambda: run_module("bench.daemon_cost", ["--seconds", "10" if q else "20"], 240),
        # HTTP and PG as torchft sends a checkpoint, PG into existing tensors, and a raw socket as the reference.
        "heal": lambda: run_module(
            "bench.heal_bandwidth",
            ["--reps", "1", "--transports", "http,pg,pg-inplace,tcp"] + (["--sizes", "10MB,100MB,1GB"] if q else []),
            1800,
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__.split("\n")[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--only", default="", help=f"comma-separated parts to run: {', '.join(PARTS)} (default: all)")
    ap.add_argument("--skip", default="", help="comma-separated parts to leave out")
    ap.add_argument("--quick", action="store_true", help="one repetition, short runs: a smoke test, not results")
    ap.add_argument("--steps", type=int, default=0, help="target step of every goodput run (default: calibrated)")
    ap.add_argument(
        "--train-s",
        type=float,
        default=20.0,
        help="fault-free training time of the faulted runs' target, calibrated per repetition (default 20)",
    )
    ap.add_argument(
        "--free-s", type=float, default=5.0, help="training time of the fault-free runs, which measure a rate"
    )
    ap.add_argument("--mtbf", default="2", help="MTBFs in seconds, comma-separated (default 2)")
    ap.add_argument(
        "--time-limit",
        type=float,
        default=1.2,
        help="a faulted run stops at its target or after this multiple of lamplighter's fault-free training time "
        "to the target (counted from its first commit: 24 s of faults at the default 20 s), whichever is first",
    )
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--replicas",
        type=int,
        default=3,
        help="replica groups (DDP ranks for checkpoint-restart), one node each; the lab has 4 compute nodes",
    )
    ap.add_argument("--kinds", default="kill,hang", help="fault kinds of the goodput schedules")
    ap.add_argument(
        "--lamplighter",
        choices=("auto", "slurm", "local"),
        default="auto",
        help="lamplighter's arm: on Slurm with its node daemons (auto: when installed), or local mode",
    )
    ap.add_argument(
        "--standbys",
        type=int,
        default=2,
        help="above 0: each group of lamplighter's arm on Slurm keeps a warm spare step (0: cold)",
    )
    ap.add_argument("--scenarios", action="store_true", help="add one node-crash and one Lighthouse-loss run each")
    ap.add_argument("--big-state", type=int, default=1024, metavar="MB", help="the big arm's extra state per replica")
    ap.add_argument(
        "--allow-dirty", action="store_true", help="run with uncommitted changes (the results then say which)"
    )
    args = ap.parse_args(argv)
    chosen = [p for p in (args.only.split(",") if args.only else PARTS) if p]
    unknown = sorted(set(chosen + [p for p in args.skip.split(",") if p]) - set(PARTS))
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
    chosen = [p for p in chosen if p not in args.skip.split(",")]
    dirty = uncommitted_changes()
    if dirty and not args.allow_dirty:
        # Every result file is stamped with the commit: numbers from other code would carry its name.
        log(f"[bench] refusing: uncommitted changes in {', '.join(dirty)} (commit them, or --allow-dirty)")
        return 2
    if args.quick:
        args.train_s, args.free_s, args.reps = 12.0, 6.0, 1
    source = environment()
    # Read by results_io.environment() in this process and in every part's own: one stamp for all files.
    os.environ[ENV_BENCH_RUN] = f"{source['commit']} {source['when']}"
    t0 = time.monotonic()
    times: dict[str, float] = {}
    failed: dict[str, str] = {}
    todo = parts(args)
    for i, name in enumerate(chosen):
        log(f"[bench] {name} ({i + 1}/{len(chosen)}) at {time.monotonic() - t0:.0f} s")
        t = time.monotonic()
        try:
            todo[name]()
        except Exception as e:  # one part's failure must not lose the others' results
            traceback.print_exc()
            failed[name] = f"{type(e).__name__}: {e}"
            log(f"[bench] {name} FAILED: {failed[name]}")
        times[name] = round(time.monotonic() - t, 1)
        log(f"[bench] {name} took {times[name]:.0f} s")
    total = round(time.monotonic() - t0, 1)
    still = uncommitted_changes()
    write_result(
        "bench_run",
        {
            "source": source,
            "parts_s": times,
            "total_s": total,
            "failed": failed,
            "quick": args.quick,
            "tree_changed_during_run": still != dirty,
            "argv": sys.argv[1:] if argv is None else argv,
        },
    )
    log(f"[bench] done in {total:.0f} s ({total / 60:.1f} min); results in {RESULTS}")
    if failed:
        log(f"[bench] failed parts: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
