"""`make bench`: every result file of the benchmark, from one run at one commit.

    python -m bench                       # make bench: the parts below but heal and stall, about 45 minutes here
    python -m bench --only heal           # make bench-heal: a part of its own (its own stamp, bench_run_heal.json)
    python -m bench --quick               # a smoke run: one short repetition of everything

Parts, in the order they run (each writes bench/results/<file>; a part that fails is reported and the
run goes on, exiting 1 at the end):
  goodput     lamplighter, checkpoint-restart and the 10-s poll runner under one fault schedule per
              repetition, delivered exactly to each, and fault-free (bench.goodput): goodput.json
  big         the same when every replica holds 1 GB more state (heals send it, checkpoints write and
              read it): goodput_big.json
  cost        what one fault costs, per kind and strategy, one fault at a time (bench.fault_cost):
              fault_cost.json
  model       the goodput model replayed on the goodput runs' faults with the per-fault costs
              (bench.model_check): model_check.json; its projection, 64 to 16k GPUs: plan_sweep.png
  warm        restart to first commit with and without a warm standby, local mode: warm_restart.json
  warm-slurm  kill to first commit on Slurm: in-job spare, in-job cold, requeue: warm_restart_slurm.json
  overhead    torchft's per-step cost against plain DDP: overhead.json
  quorum      Lighthouse quorum time for 2..64 groups: lighthouse_quorum.json
  gpu-probe   the GPU check's cost: gpu_probe_cost.json
  daemon      the node daemon's cost: daemon_cost.json
  prolog      the Prolog's cost per job start, median and p99: prolog_cost.json
Parts of their own (not in the default run; `--only NAME`, each with its own stamp file):
  heal        heal bandwidth per transport, 10 MB..4 GB, next to memcpy: heal_bandwidth.json
  stall       the survivors' stall against the number of groups (3, 6, 12), local mode: stall_groups.json

Every file's environment carries its run's `bench_run` (the commit and the start time); a run refuses
uncommitted changes to tracked files, and bench_run.json (bench_run_heal.json, bench_run_stall.json; a run
of some parts, bench_run_partial.json) records each part's time.
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
from typing import Any

from bench.jobspec import BUILD, HANG_TIMEOUT_S, REPO, Workload
from bench.results_io import ENV_BENCH_RUN, RESULTS, environment, uncommitted_changes, write_result

PARTS = (
    "goodput",
    "big",
    "cost",
    "model",
    "warm",
    "warm-slurm",
    "overhead",
    "quorum",
    "gpu-probe",
    "daemon",
    "prolog",
)
SEPARATE = ("heal", "stall")  # make targets of their own: each writes bench_run_<part>.json


def stamp_file(chosen: list[str]) -> str:
    """The record a run writes: bench_run.json only for every part of `make bench`, so that a run of some parts
    (`--only cost,model`) leaves the full run's record, which the READMEs' tables cite, in place."""
    if len(chosen) == 1 and chosen[0] in SEPARATE:
        return f"bench_run_{chosen[0]}"
    return "bench_run" if set(chosen) == set(PARTS) else "bench_run_partial"


def log(msg: str) -> None:
    print(msg, flush=True)


def regime_of(args: argparse.Namespace) -> Any:
    from bench.goodput import Regime, quick

    r = Regime(
        window_s=args.window_s,
        free_s=args.free_s,
        group_mtbf_s=args.group_mtbf,
        guard_s=args.guard_s,
        kinds=tuple(args.kinds.split(",")),
    )
    return quick(r) if args.quick else r


def need_slurm() -> None:
    from bench.lamplighter_slurm import available
    from lamplighter.lab.testcluster import slurm_installed

    missing = slurm_installed() or available()
    if missing:
        raise SystemExit(f"bench: needs Slurm and lamplighter's node daemon: {missing}")


def run_goodput(args: argparse.Namespace, big_mb: int) -> None:
    from dataclasses import asdict

    from bench.goodput import run_all
    from bench.summarize import write_all
    from lamplighter.lab.testcluster import TestCluster

    need_slurm()
    suffix = "_big" if big_mb else ""
    regime = regime_of(args)
    reps = args.big_reps if big_mb else args.reps
    # Shared loopback on purpose: the baselines' Lighthouse is a process of this machine (bench/baselines), which
    # nodes of their own would not reach; lamplighter's own arm runs on a lab of its own (a network per node).
    cluster = TestCluster(BUILD / "cluster", nodes=4)
    cluster.up()
    w = Workload(replicas=args.replicas, state_pad_mb=big_mb, fallback_interval_s=args.fallback_s)
    try:
        rows, schedules = run_all(w, reps, regime, cluster, sys.executable, log)
    finally:
        cluster.down()
    doc = write_all(
        rows,
        schedules,
        {"workload": asdict(w), "regime": asdict(regime), "reps": reps, "state_pad_mb": big_mb},
        suffix=suffix,
    )
    log(f"[bench] goodput{suffix}: {json.dumps({k: doc[k] for k in ('table', 'fault_free', 'ratios')})}")


def run_cost(args: argparse.Namespace) -> None:
    from bench.fault_cost import PHASE_S, run_costs, summarize
    from bench.goodput import STRATEGIES, Bench
    from lamplighter.lab.testcluster import TestCluster

    need_slurm()
    # Shared loopback on purpose: the baselines' Lighthouse is a process of this machine (bench/baselines), which
    # nodes of their own would not reach; lamplighter's own arm runs on a lab of its own (a network per node).
    cluster = TestCluster(BUILD / "cluster", nodes=4)
    cluster.up()
    w = Workload(replicas=args.replicas, fallback_interval_s=args.fallback_s)
    b = Bench(w, cluster, BUILD / "runs", sys.executable)
    kinds = tuple(args.cost_kinds.split(","))
    n = 1 if args.quick else args.cost_n
    try:
        costs, runs = run_costs(b, STRATEGIES, kinds, n, args.settle_s, args.cap_s, log)
    finally:
        b.close()
        cluster.down()
    write_result(
        "fault_cost",
        {
            "config": {
                "kinds": kinds,
                "n": n,
                "settle_s": args.settle_s,
                "cap_s": args.cap_s,
                "replicas": w.replicas,
                "hang_timeout_s": HANG_TIMEOUT_S,
                "phase_s": PHASE_S,
            },
            "table": summarize(costs),
            "faults": costs,
            "runs": runs,
        },
    )


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
        "cost": lambda: run_cost(args),
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
        "prolog": lambda: run_module("bench.prolog_cost", ["--runs", "20" if q else "40"], 300),
        # HTTP and PG as torchft sends a checkpoint, PG into existing tensors, and a raw socket as the reference.
        "heal": lambda: run_module(
            "bench.heal_bandwidth",
            ["--reps", "1" if q else "3", "--transports", "http,http-torchft,pg,pg-inplace,tcp"]
            + (["--sizes", "10MB,100MB,1GB"] if q else []),
            3600,
        ),
        "stall": lambda: run_module(
            "bench.stall_groups", ["--groups", "3,6" if q else "3,6,12", "--n", "1" if q else "3"], 3600
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__.split("\n")[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--only",
        default="",
        help=f"comma-separated parts to run: {', '.join(PARTS + SEPARATE)} (default: {', '.join(PARTS)})",
    )
    ap.add_argument("--skip", default="", help="comma-separated parts to leave out")
    ap.add_argument("--quick", action="store_true", help="one repetition, short runs: a smoke test, not results")
    g = ap.add_argument_group("goodput under identical faults (goodput, big)")
    g.add_argument("--window-s", type=float, default=40.0, help="training time of every faulted run (default 40)")
    g.add_argument("--free-s", type=float, default=10.0, help="training time of every fault-free run (default 10)")
    g.add_argument(
        "--group-mtbf", type=float, default=9.0, help="one fault per group per this many seconds (default 9)"
    )
    g.add_argument(
        "--guard-s",
        type=float,
        default=12.0,
        help="the schedule never hits every group within this long, so a live peer is left (default 12)",
    )
    g.add_argument(
        "--kinds",
        default="kill,kill,hang,hang-collective",
        help="fault kinds drawn, repeat one to weight it (default kill,kill,hang,hang-collective: half hangs)",
    )
    g.add_argument("--reps", type=int, default=4, help="repetitions of the small-state arm (default 4)")
    g.add_argument("--big-reps", type=int, default=3, help="repetitions of the +1 GB arm (default 3)")
    g.add_argument("--big-state", type=int, default=1024, metavar="MB", help="the big arm's extra state per replica")
    g.add_argument(
        "--fallback-s",
        type=float,
        default=10.0,
        help="the torchft strategies' fallback checkpoint interval, s (default 10)",
    )
    ap.add_argument(
        "--replicas",
        type=int,
        default=3,
        help="replica groups (DDP ranks for checkpoint-restart), one node each; the lab has 4 compute nodes",
    )
    c = ap.add_argument_group("what one fault costs (cost)")
    c.add_argument("--cost-kinds", default="kill,hang,hang-collective", help="kinds (node-crash too, if wanted)")
    c.add_argument("--cost-n", type=int, default=3, help="faults of each kind per strategy (default 3)")
    c.add_argument("--settle-s", type=float, default=5.0, help="the job whole this long before each fault")
    c.add_argument(
        "--cap-s", type=float, default=20.0, help="a fault not recovered from by then is ended by the harness"
    )
    ap.add_argument(
        "--allow-dirty", action="store_true", help="run with uncommitted changes (the results then say which)"
    )
    args = ap.parse_args(argv)
    chosen = [p for p in (args.only.split(",") if args.only else PARTS) if p]
    unknown = sorted(set(chosen + [p for p in args.skip.split(",") if p]) - set(PARTS + SEPARATE))
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; the parts are {', '.join(PARTS + SEPARATE)}")
    separate = [p for p in chosen if p in SEPARATE]
    if separate and len(chosen) > 1:
        ap.error(f"{separate[0]} is a part of its own (make bench-{separate[0]}): run it alone")
    chosen = [p for p in chosen if p not in args.skip.split(",")]
    dirty = uncommitted_changes()
    if dirty and not args.allow_dirty:
        # Every result file is stamped with the commit: numbers from other code would carry its name.
        log(f"[bench] refusing: uncommitted changes in {', '.join(dirty)} (commit them, or --allow-dirty)")
        return 2
    if args.quick:
        args.reps = args.big_reps = 1
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
        stamp_file(chosen),
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
