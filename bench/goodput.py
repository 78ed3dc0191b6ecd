"""Goodput under failures: lamplighter, checkpoint-restart and the 10-s poll runner, same job, same faults.

    python -m bench.goodput [--steps 150] [--mtbf 15,30] [--reps 2] [--kinds kill,hang]

For each repetition: a fault-free run of every strategy, then one run per
MTBF, strategies interleaved (their order rotates per repetition), each to
the same target step with the same fault schedule (lamplighter's planner,
seed = repetition and MTBF). The baselines run on a real Slurm cluster
started on this machine (lamplighter.lab.testcluster); lamplighter runs on
the same cluster with its node daemons and warm in-job spares (`--lamplighter
local`: in local mode). The fault schedule: bench/fault_schedule.py.
Raw runs go to bench/results/goodput.json; the recovery anatomy of every
fault to bench/results/recovery.json.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench.baselines.ckpt_restart import CheckpointRestart
from bench.baselines.ckpt_trainer import read_events
from bench.baselines.poll_runner import PollRunner
from bench.fault_schedule import schedule
from bench.jobspec import BUILD, Workload, job_config
from bench.lamplighter_arm import run_local
from bench.lamplighter_slurm import LamplighterSlurm, lamplighter_lab
from bench.metrics import run_metrics
from bench.runrecord import RunRecord
from bench.slurm_drive import drive
from lamplighter.lab.slurm_lab import SlurmLab
from lamplighter.lab.testcluster import TestCluster, reset_cluster
from lamplighter.slurm.actions import SlurmActions
from lamplighter.supervisor.chaos import PlannedFault
from lamplighter.supervisor.ports import free_port

STRATEGIES = ("lamplighter", "ckpt-restart", "poll-10s")
LOCAL_START_S = 20.0  # local mode's launch to first commit: 3-5 s here, cold
GUESS_STEP_S = 0.25  # a fault-free torchft step of the benchmark's job here: 0.23-0.28 s in the runs so far


def checkpoint_choice(run_dir: Path, run: RunRecord) -> dict[str, Any] | None:
    """The Young/Daly interval the checkpoint-restart trainer chose, as seconds and as steps."""
    events = read_events(run_dir)
    interval = next((e for e in events if e["event"] == "interval"), None)
    costs = [e["cost_s"] for e in events if e["event"] == "checkpoint"]
    ts = sorted(r.t for r in run.steps.get(0, []) if r.committed)
    gaps = sorted(b - a for a, b in itertools.pairwise(ts))
    step_s = gaps[len(gaps) // 2] if gaps else None
    if interval is None:
        return None
    return {
        "first_cost_s": interval["cost_s"],
        "mtbf_s": interval["mtbf_s"],
        "tau_s": interval["tau_s"],
        "median_cost_s": sorted(costs)[len(costs) // 2] if costs else None,
        "checkpoints": len(costs),
        "median_step_s": step_s,
        "k_steps": round(interval["tau_s"] / step_s, 1) if step_s else None,
    }


class Bench:
    def __init__(
        self, w: Workload, cluster: TestCluster, root: Path, python: str, lamplighter_mode: str = "local"
    ) -> None:
        self.w, self.cluster, self.root, self.python = w, cluster, root, python
        self.lamplighter_mode = lamplighter_mode
        self.api = SlurmActions(cluster.cli(timeout=15))
        self.lab: SlurmLab | None = None

    def lamplighter_lab(self) -> SlurmLab:
        if self.lab is None:
            root = BUILD / "labs" / f"lamplighter-{self.w.state_pad_mb}"
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            self.lab = lamplighter_lab(root, self.w)
        return self.lab

    def close(self) -> None:
        if self.lab is not None:
            self.lab.down()
            self.lab = None

    def one(
        self,
        strategy: str,
        mtbf_s: float | None,
        rep: int,
        seed: int,
        planned: list[PlannedFault],
        timeout_s: float,
        ckpt_mtbf_s: float,
        tag: str | None = None,
        until_recovered: bool = False,
        steps: int | None = None,
    ) -> RunRecord:
        tag = tag or f"{strategy}-m{int(mtbf_s) if mtbf_s else 0}-r{rep}"
        w = self.w if steps is None else Workload(**{**self.w.__dict__, "steps": steps})
        run_dir = self.root / tag
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(run_dir.parent / f"{tag}.in", ignore_errors=True)
        run_id = f"{tag}-{int(time.time())}"
        if strategy == "lamplighter" and self.lamplighter_mode == "slurm":
            if mtbf_s is None:
                # A fault-free run measures the training rate only (its start-up is not counted): it starts
                # cold: no spare importing torch beside it.
                w = Workload(**{**w.__dict__, "standbys": 0})
            ll = LamplighterSlurm(self.lamplighter_lab(), run_dir, w, run_id, tag)
            run = drive(
                ll,
                planned,
                seed=seed,
                target=w.steps,
                timeout_s=timeout_s,
                mtbf_s=mtbf_s,
                rep=rep,
                until_recovered=until_recovered,
            )
            run.extra["mode"] = "slurm: lamplighter submit + lamplighter supervise on every node"
            return run
        if strategy == "lamplighter":
            job = job_config(f"b-{tag}", run_dir, w, run_id=run_id)
            # Local mode's limit is wall time from the launch: its start-up comes on top of the training budget.
            wall_s = timeout_s + LOCAL_START_S
            return run_local(job, planned, seed=seed, timeout_s=wall_s, mtbf_s=mtbf_s, rep=rep, python=self.python)
        reset_cluster(self.cluster)
        conf = str(self.cluster.conf_path)
        if strategy == "ckpt-restart":
            job = job_config(f"b-{tag}", run_dir, w, run_id=run_id, slurm_conf=conf)
            strat: CheckpointRestart | PollRunner = CheckpointRestart(
                job, self.api, run_id, self.python, mtbf_s=ckpt_mtbf_s
            )
        else:
            job = job_config(
                f"b-{tag}",
                run_dir,
                w,
                run_id=run_id,
                slurm_conf=conf,
                requeue=False,
                lighthouse_port=free_port(),
                under_slurm=True,
            )
            strat = PollRunner(job, self.api, run_id, self.python)
        run = drive(
            strat,
            planned,
            seed=seed,
            target=w.steps,
            timeout_s=timeout_s,
            mtbf_s=mtbf_s,
            rep=rep,
            crash_node=self.cluster.crash_node,
            until_recovered=until_recovered,
        )
        if isinstance(strat, CheckpointRestart):
            run.extra["checkpoint"] = checkpoint_choice(run_dir, run)
            run.extra["requeues"] = len(strat.requeues)
        else:
            run.extra["submissions"] = len(strat.submissions)
        return run


MIN_STEPS = 20  # a rate over fewer steps would be mostly the first step's jitter


def steps_for(train_s: float, step_s: float) -> int:
    return int(min(2000, max(MIN_STEPS, round(train_s / step_s))))


def run_all(
    w: Workload,
    mtbfs: list[float],
    reps: int,
    kinds: list[str],
    cluster: TestCluster,
    python: str,
    log: Any = print,
    lamplighter_mode: str = "local",
    calibrate_s: float | None = None,
    free_share: float = 1.0,
    time_limit: float = 2.5,
    strategies: tuple[str, ...] = STRATEGIES,
) -> list[dict[str, Any]]:
    """Every repetition: each strategy's fault-free run, then its runs under each MTBF, strategies interleaved.

    `free_share` shortens the fault-free runs to that share of the target: they only measure a rate
    (samples per second of training), and long faulted runs are what it takes to see many faults.
    `time_limit` caps a faulted run at that multiple of its strategy's fault-free time to the target.
    """
    root = BUILD / "runs"
    root.mkdir(parents=True, exist_ok=True)
    b = Bench(w, cluster, root, python, lamplighter_mode)
    out: list[dict[str, Any]] = []
    # The machine's load drifts: each repetition's target comes from its own fault-free lamplighter run, so
    # that the faulted runs train about calibrate_s fault-free. Only the first fault-free runs' length depends
    # on this guess (and they run at least MIN_STEPS); a calibration run cost 40 s per arm.
    step_s = GUESS_STEP_S
    try:
        for rep in range(reps):
            k = rep % len(strategies)
            order = list(strategies[k:] + strategies[:k])
            free_pace: dict[str, float] = {}  # strategy -> seconds per fault-free step
            if calibrate_s:
                free_steps = steps_for(calibrate_s * free_share, step_s)
            else:
                free_steps = max(MIN_STEPS, round(w.steps * free_share))
            for level, mtbf in enumerate([None, *mtbfs]):
                seed = 1000 * (rep + 1) + level
                if mtbf is not None and calibrate_s and "lamplighter" in free_pace:
                    step_s = free_pace["lamplighter"]
                    b.w = w = Workload(**{**w.__dict__, "steps": steps_for(calibrate_s, step_s)})
                    log(f"[goodput] rep {rep}: {step_s * 1000:.0f} ms per fault-free step -> target {w.steps} steps")
                for strategy in order:
                    # One training-time budget for every strategy's faulted run of a repetition (the first
                    # strategy's fault-free training time to the target, x time_limit), counted from each run's
                    # first commit, so that each is exposed to the same faults as long whatever its start-up
                    # (checkpoint-restart's 9-12 s start had cut its exposure to 7 scheduled faults). A run stops
                    # at its target or at the budget: goodput is a rate, and a strategy that cannot keep up with
                    # the faults would otherwise take all the time there is.
                    pace = free_pace.get(strategies[0], free_pace.get(strategy, 0.5))
                    timeout = time_limit * pace * w.steps if mtbf is not None else 300.0
                    planned = schedule(mtbf, seed, kinds, horizon_s=timeout)
                    t0 = time.monotonic()
                    run = b.one(
                        strategy,
                        mtbf,
                        rep,
                        seed,
                        planned,
                        timeout,
                        ckpt_mtbf_s=mtbf or max(mtbfs),
                        steps=None if mtbf is not None else free_steps,
                    )
                    m = run_metrics(run)
                    if mtbf is None and m["train_s"]:
                        # train_s runs from the first committed step to the target: free_steps - 1 steps.
                        free_pace[strategy] = m["train_s"] / max(1, free_steps - 1)
                    row = {"run": run.summary(), "metrics": m}
                    out.append(row)
                    log(
                        f"[goodput] rep {rep} mtbf {mtbf} {strategy}: reached {m['reached']} train {m['train_s'] or 0:.1f} s "
                        f"goodput {m['goodput_samples_per_s'] or 0:.1f} samples/s faults {m['faults']} "
                        f"lost {m['steps_lost']} ({time.monotonic() - t0:.0f} s)"
                    )
    finally:
        b.close()
    return out


def main(argv: list[str] | None = None) -> int:
    from bench.summarize import write_all

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--mtbf", default="15,30", help="comma-separated MTBFs in seconds")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--kinds", default="kill,hang")
    args = ap.parse_args(argv)
    w = Workload(steps=args.steps)
    cluster = TestCluster(BUILD / "cluster", nodes=4)
    cluster.up()
    try:
        rows = run_all(
            w, [float(x) for x in args.mtbf.split(",")], args.reps, args.kinds.split(","), cluster, sys.executable
        )
    finally:
        cluster.down()
    write_all(rows, {"workload": w.__dict__, "mtbf_s": args.mtbf, "reps": args.reps, "kinds": args.kinds})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
