"""Goodput under identical faults: lamplighter, checkpoint-restart and the 10-s poll runner, same job, same faults.

Per repetition, strategies in an order that rotates:
- fault-free, `free_s` of training each: plain DDP with no checkpoint (`ddp`: the job as it would train if
  nothing failed, the one yardstick of the repetition), the torchft job (`torchft`, lamplighter's arm with no
  fault: the own fault-free rate of lamplighter and of the poll runner, which run the same trainer with the
  same torchft settings), and checkpoint-restart with its checkpoints (its own fault-free rate);
- under faults, `window_s` of training each: lamplighter, checkpoint-restart and the poll runner, every one
  given the repetition's one schedule (bench/fault_schedule.py), delivered exactly (bench/slurm_drive.py).
Runs have no step target: each ends `window_s` after its own first commit. The baselines run on a real
Slurm cluster started on this machine (lamplighter.lab.testcluster); lamplighter on a Slurm lab with its
node daemons (bench/lamplighter_slurm.py). Raw runs go to bench/results/goodput.json.
"""

from __future__ import annotations

import itertools
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.baselines.ckpt_restart import CheckpointRestart
from bench.baselines.ckpt_trainer import read_events
from bench.baselines.poll_runner import InJobRestart, PollRunner, unexplained_resubmissions
from bench.fault_schedule import Schedule, draw
from bench.jobspec import BUILD, Workload, job_config
from bench.lamplighter_slurm import LamplighterSlurm, lamplighter_lab
from bench.metrics import run_metrics
from bench.runrecord import RunRecord
from bench.slurm_drive import Timed, Trigger, drive
from lamplighter.lab.slurm_lab import SlurmLab
from lamplighter.lab.testcluster import TestCluster, reset_cluster
from lamplighter.slurm.actions import SlurmActions
from lamplighter.system.ports import free_port

# lamplighter cold (as `lamplighter init` wrote it) and as recommended (slurm.spare: a warm spare per group); the
# goodput runs and the per-fault costs measure the same arms.
STRATEGIES = ("lamplighter", "lamplighter-spare", "ckpt-restart", "poll-10s", "in-job-restart")
FAULT_FREE = ("ddp", "torchft", "ckpt-restart")
YARDSTICK = "ddp"
# Each strategy's own fault-free run: lamplighter and the poll runner train the same torchft job.
OWN_FAULT_FREE = {
    "lamplighter": "torchft",
    "lamplighter-spare": "torchft",
    "poll-10s": "torchft",
    "in-job-restart": "torchft",
    "ckpt-restart": "ckpt-restart",
}


@dataclass(frozen=True)
class Regime:
    """How dense the faults are, and how long each run trains."""

    window_s: float = 40.0  # training time of a faulted run, from its first commit
    free_s: float = 10.0  # training time of a fault-free run (it measures a rate)
    group_mtbf_s: float = 9.0  # one fault per group per this many seconds, before the guard
    guard_s: float = 12.0  # never every group within this long (lamplighter's slowest recovery here)
    kinds: tuple[str, ...] = ("kill", "kill", "hang", "hang-collective")

    def schedule(self, rep: int, groups: int) -> Schedule:
        return draw(1000 * (rep + 1), groups, list(self.kinds), self.window_s, self.group_mtbf_s, self.guard_s)


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
    """Starts one run of any strategy on the benchmark's clusters."""

    def __init__(self, w: Workload, cluster: TestCluster, root: Path, python: str) -> None:
        self.w, self.cluster, self.root, self.python = w, cluster, root, python
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
        trigger: Trigger,
        *,
        window_s: float,
        rep: int,
        seed: int,
        mtbf_s: float | None,
        ckpt_mtbf_s: float,
        tag: str,
    ) -> RunRecord:
        """strategy: lamplighter, torchft (lamplighter's arm, its name in the record), ckpt-restart, poll-10s, ddp."""
        run_dir = self.root / tag
        shutil.rmtree(run_dir, ignore_errors=True)
        run_id = f"{tag}-{int(time.time())}"
        if strategy in ("lamplighter", "torchft", "lamplighter-spare"):
            lab = self.lamplighter_lab()
            spare = strategy == "lamplighter-spare"
            ll = LamplighterSlurm(lab, run_dir, self.w, run_id, tag, spare=spare)
            run = drive(ll, trigger, window_s=window_s, rep=rep, seed=seed, mtbf_s=mtbf_s, nodes=lab.cluster)
            run.strategy = strategy
            how = "a warm spare per group (slurm.spare)" if spare else "cold starts"
            run.extra["mode"] = f"slurm: lamplighter submit + lamplighter supervise on every node, {how}"
            kills = [f for f in run.faults if f.outcome == "struck" and f.kind == "kill"]
            if spare and kills and not run.extra.get("warm_starts"):
                raise RuntimeError(f"{run_dir}: the spare arm struck {len(kills)} kill(s) and started no trainer warm")
            return run
        reset_cluster(self.cluster)
        conf = str(self.cluster.conf_path)
        strat: CheckpointRestart | PollRunner | InJobRestart
        if strategy in ("ckpt-restart", "ddp"):
            job = job_config(f"b-{tag}", run_dir, self.w, run_id=run_id, slurm_conf=conf)
            mtbf = ckpt_mtbf_s if strategy == "ckpt-restart" else None
            strat = CheckpointRestart(job, self.api, run_id, self.python, mtbf_s=mtbf)
        elif strategy in ("poll-10s", "in-job-restart"):
            job = job_config(
                f"b-{tag}",
                run_dir,
                self.w,
                run_id=run_id,
                slurm_conf=conf,
                requeue=False,
                lighthouse_port=free_port(),
                under_slurm=True,
            )
            strat = (PollRunner if strategy == "poll-10s" else InJobRestart)(job, self.api, run_id, self.python)
        else:
            raise ValueError(f"unknown strategy {strategy!r}")
        run = drive(strat, trigger, window_s=window_s, rep=rep, seed=seed, mtbf_s=mtbf_s, nodes=self.cluster)
        if isinstance(strat, CheckpointRestart):
            if strategy == "ckpt-restart":
                run.extra["checkpoint"] = checkpoint_choice(run_dir, run)
            run.extra["requeues"] = len(strat.requeues)
        else:
            # The faithful arm, asserted: none of lamplighter's parts in its scripts, and every submission
            # past the first of each group brought about by a fault that ended that group's job.
            if strat.extra.get("agent_in_scripts"):
                raise RuntimeError(f"{run_dir}: the {strategy} arm's scripts start lamplighter's in-job agent")
            run.extra["resubmissions_unexplained"] = unexplained_resubmissions(strat.submissions, run.faults)
            if strategy == "in-job-restart" and strat.extra["submissions"] != strat.replicas:
                raise RuntimeError(
                    f"{run_dir}: the in-job arm submitted {strat.extra['submissions']} jobs, not one a group"
                )
        return run


def run_all(
    w: Workload,
    reps: int,
    regime: Regime,
    cluster: TestCluster,
    python: str,
    log: Any = print,
    strategies: tuple[str, ...] = STRATEGIES,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(runs, schedules): every repetition's fault-free runs, then its faulted runs, orders rotating."""
    root = BUILD / "runs"
    root.mkdir(parents=True, exist_ok=True)
    b = Bench(w, cluster, root, python)
    out: list[dict[str, Any]] = []
    schedules: list[dict[str, Any]] = []
    label = f"{w.state_pad_mb}mb" if w.state_pad_mb else "small"
    try:
        for rep in range(reps):
            sched = regime.schedule(rep, w.replicas)
            schedules.append({"rep": rep, **sched.as_json()})
            # A careful checkpoint-restart user knows the cluster's MTBF: this repetition's, faults over time.
            job_mtbf = (regime.window_s - sched.params["start_s"]) / max(1, len(sched.faults))
            k = rep % len(strategies)
            free_order = list(FAULT_FREE[k % len(FAULT_FREE) :] + FAULT_FREE[: k % len(FAULT_FREE)])
            runs: list[tuple[str, bool]] = [(s, False) for s in free_order]
            runs += [(s, True) for s in strategies[k:] + strategies[:k]]
            for strategy, faulted in runs:
                t0 = time.monotonic()
                run = b.one(
                    strategy,
                    Timed(sched.faults if faulted else ()),
                    window_s=regime.window_s if faulted else regime.free_s,
                    rep=rep,
                    seed=sched.params["seed"],
                    mtbf_s=regime.group_mtbf_s if faulted else None,
                    ckpt_mtbf_s=job_mtbf,
                    tag=f"{label}-{strategy}-{'f' if faulted else 'free'}-r{rep}",
                )
                m = run_metrics(run)
                out.append({"run": run.summary(), "metrics": m})
                log(
                    f"[goodput] rep {rep} {strategy} {'faulted' if faulted else 'fault-free'}: "
                    f"{m['samples_per_s'] or 0:.1f} samples/s over {m['train_s'] or 0:.1f} s, faults "
                    f"{m['faults_struck']} struck + {m['faults_absorbed']} absorbed, {m['steps_lost']} steps lost "
                    f"({time.monotonic() - t0:.0f} s)"
                )
    finally:
        b.close()
    return out, schedules


def quick(regime: Regime) -> Regime:
    """A smoke run's regime: short windows, the same density."""
    return replace(regime, window_s=20.0, free_s=6.0)
