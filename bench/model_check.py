"""The goodput model (lamplighter/plan/goodput_model.py) against the benchmark's own measured goodput.

    python -m bench.model_check          # reads bench/results/{goodput,recovery}.json, writes model_check.json

Nothing runs: the model is fed the benchmark's configuration (its groups of one process each, one
"GPU" per group and per node) and the component times the benchmark measured (recovery.json: medians
over every fault of a kind), and predicts each faulted goodput run's goodput_rel from the faults that
run had. No parameter is fitted to the goodput numbers.

Two predictions per run:
- steady: the model as `lamplighter plan` evaluates it, at the run's realised fault rate
  (faults / (groups x training seconds)) and hang share. It assumes recoveries short against the run.
- cut: the same per-fault costs, each cut at the end of the run: these runs last ~20 s and a hang's
  recovery 15 s, so a fault late in a run costs only until the target is reached (what the
  benchmark counts). Same formulas, the run's finite length applied to each fault.

And one look at the measurement's reference, from the measurements alone: `reference_slowdown` is the
fault-free run's step time over this run's step time outside every recovery window (fault to
progress_s); `measured_own_reference` divides goodput_rel by it, i.e. against the faulted run's own
fault-free pace. The model assumes the two paces are equal.

Measured components, and the model term each one sets:
- detect: recovery's detect_s (per kind);  group/job restart: failed_commits_s - detect_s of a kill
  (it includes the heal or the checkpoint read, both milliseconds for this model, and one step);
- survivors' stall: survivors_commit_s - half a fault-free step (the wait for the next commit a
  survivor would have had anyway);
- checkpoint cost C: goodput.json's checkpoint_interval.checkpoint_cost_s; interval: the benchmark's
  own rule, sqrt(2 C MTBF) at the configured MTBF (16 s for the fault-free run);
- poll runner: the model's detection (poll / 2), not the measured one; hangs hold the group until
  the run's end (its "time limit").
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

from bench.results_io import RESULTS, write_result
from lamplighter.plan import goodput_model as gm

STRATEGIES = ("lamplighter", "ckpt-restart", "poll-10s")
POLL_S = 10.0  # bench/baselines/poll_runner.py polls squeue every 10 s
TOLERANCE = 0.10  # the bar: within 10% of the measured goodput


def median_of(table: dict[str, Any], kind: str, strategy: str, key: str) -> float:
    cell = table.get(kind, {}).get(strategy, {}).get(key, {})
    if not cell.get("n"):
        raise ValueError(f"recovery.json has no {key} for {strategy} {kind}")
    return float(cell["median"])


def fault_free_steps(goodput: dict[str, Any], strategy: str) -> dict[int, float]:
    """Per repetition, the fault-free run's step time: training seconds over target steps."""
    runs = [r for r in goodput["runs"] if r["run"]["strategy"] == strategy and r["run"]["mtbf_s"] is None]
    return {
        r["run"]["rep"]: r["metrics"]["train_s"] / r["run"]["target_steps"]
        for r in runs
        if not r["run"]["faults"] and r["metrics"]["train_s"]
    }


def components(recovery: dict[str, Any], strategy: str, step: float) -> dict[str, float]:
    """The measured times the model takes, per strategy (see the module docstring)."""
    t = recovery["table"]
    out = {
        "detect_s": median_of(t, "kill", strategy, "detect_s"),
        "restart_s": median_of(t, "kill", strategy, "failed_commits_s") - median_of(t, "kill", strategy, "detect_s"),
        "stall_s": max(0.0, median_of(t, "kill", strategy, "survivors_commit_s") - step / 2),
        "hang_stall_s": max(0.0, median_of(t, "hang", strategy, "survivors_commit_s") - step / 2),
        "step_s": step,
    }
    if strategy != "poll-10s":  # the poll runner never detects a hang
        out["hang_detect_s"] = median_of(t, "hang", strategy, "detect_s")
    return out


def costs_for(strategy: str, comp: dict[str, float], interval_s: float, time_limit_s: float) -> gm.Costs:
    """The model's cost inputs for the benchmark. State is 1 byte: heal and read are inside the restart."""
    inf = math.inf
    if strategy == "ckpt-restart":
        return gm.Costs(
            ckpt_write_bps=1.0 / comp["checkpoint_s"],  # so that C = S / bandwidth = the measured cost
            ckpt_read_bps=inf,
            ckpt_interval_s=interval_s,
            job_restart_s=comp["restart_s"],
            ckpt_detect_s=comp["detect_s"],
            ckpt_hang_detect_s=comp["hang_detect_s"],
        )
    return gm.Costs(
        detect_s=comp["detect_s"],
        hang_detect_s=comp.get("hang_detect_s", inf),
        group_restart_s=comp["restart_s"],
        heal_bps_per_gpu=inf,
        stall_s=comp["stall_s"],
        hang_stall_s=comp["hang_stall_s"],
        poll_s=POLL_S,
        time_limit_s=time_limit_s,
    )


BENCH_WORK = gm.Workload(params=1.0, bytes_per_param=1.0)


def bench_cluster(groups: int, rate_per_gpu_s: float, hang_share: float) -> gm.Cluster:
    # One process per group, one per "node": a fault takes out exactly one group.
    return gm.Cluster(
        gpus=groups, gpus_per_node=1, group_gpus=1, failures_per_gpu_s=rate_per_gpu_s, hang_share=hang_share
    )


MODEL_FN = {"lamplighter": gm.lamplighter, "ckpt-restart": gm.checkpoint_restart, "poll-10s": gm.poll_runner}


def predict_run(
    run: dict[str, Any],
    metrics: dict[str, Any],
    comp: dict[str, float],
    c_s: float,
    mtbfs: list[float],
    ff_step_s: float,
) -> dict[str, Any]:
    """Steady and cut predictions of one faulted run's goodput_rel."""
    strategy, groups, train_s = run["strategy"], run["replicas"], metrics["train_s"]
    faults = run["faults"]
    hangs = sum(f["kind"] == "hang" for f in faults)
    rate = len(faults) / (groups * train_s)
    tau = math.sqrt(2 * c_s * run["mtbf_s"])
    tau_ff = math.sqrt(2 * c_s * max(mtbfs))  # the fault-free run checkpointed at the largest MTBF's interval
    fn = MODEL_FN[strategy]
    comp = {**comp, "checkpoint_s": c_s}

    def model(hang_share: float, time_limit_s: float, n_rate: float = rate) -> gm.Result:
        costs = costs_for(strategy, comp, tau, time_limit_s)
        return fn(bench_cluster(groups, n_rate, hang_share), BENCH_WORK, costs)

    # The fault-free reference of the same strategy: ckpt-restart still pays its checkpoints there.
    ff = 1.0 - c_s / tau_ff if strategy == "ckpt-restart" else 1.0
    steady = model(hangs / len(faults), train_s).goodput / ff
    # cut: each fault's cost, cut at the end of training (first commit + train_s).
    end = run["t_start"] + metrics["startup_s"] + train_s
    lost_gpu_s = c_s / tau * groups * train_s if strategy == "ckpt-restart" else 0.0
    for f in faults:
        left = max(0.0, end - f["t_injected"])
        one = model(1.0 if f["kind"] == "hang" else 0.0, math.inf)
        d = one.detail
        if strategy == "ckpt-restart":
            lost_gpu_s += groups * min(d["job_down_s"], left)
        else:
            out = (
                d["group_out_s"]
                if strategy == "lamplighter"
                else d["hang_out_s" if f["kind"] == "hang" else "exit_out_s"]
            )
            lost_gpu_s += min(out, left) + (groups - 1) * min(d["stall_s"], left)
    cut = max(0.0, 1.0 - lost_gpu_s / (groups * train_s)) / ff
    # The reference: the fault-free run's step time against this run's steps outside every recovery window.
    recovering = sum(
        min(a["progress_s"] if a["progress_s"] is not None else math.inf, max(0.0, end - f["t_injected"]))
        for a, f in zip(metrics["anatomy"], faults, strict=True)
    )
    # Steps done: the target, or fewer for a run stopped at its time limit (older results lack high_step).
    normal_step = (train_s - recovering) / (metrics.get("high_step", run["target_steps"]) + metrics["steps_lost"])
    ratio = ff_step_s / normal_step
    return {
        "mtbf_s": run["mtbf_s"],
        "rep": run["rep"],
        "faults": len(faults),
        "hangs": hangs,
        "train_s": train_s,
        "measured": metrics["goodput_rel"],
        "steady": steady,
        "cut": cut,
        "fault_free_step_s": ff_step_s,
        "normal_step_s": normal_step,
        "reference_slowdown": ratio,
        "measured_own_reference": metrics["goodput_rel"] / ratio,
    }


def check(goodput: dict[str, Any], recovery: dict[str, Any]) -> dict[str, Any]:
    c_s = float(goodput["checkpoint_interval"]["checkpoint_cost_s"]["median"])
    mtbfs = [float(m) for m in goodput["config"]["mtbf_s"]]
    out: dict[str, Any] = {}
    for strategy in STRATEGIES:
        ff_steps = fault_free_steps(goodput, strategy)
        comp = components(recovery, strategy, statistics.median(ff_steps.values()))
        faulted = [
            r
            for r in goodput["runs"]
            if r["run"]["strategy"] == strategy and r["run"]["faults"] and r["metrics"].get("goodput_rel") is not None
        ]
        runs = [predict_run(r["run"], r["metrics"], comp, c_s, mtbfs, ff_steps[r["run"]["rep"]]) for r in faulted]
        if not runs:
            out[strategy] = {"components_s": comp, "median": None, "runs": [], "unreached": 0}
            continue
        summary: dict[str, Any] = {}
        for key in ("measured", "steady", "cut", "reference_slowdown", "measured_own_reference"):
            summary[key] = statistics.median(r[key] for r in runs)
        for key in ("steady", "cut"):
            summary[f"{key}_error"] = summary[key] / summary["measured"] - 1
            summary[f"{key}_within_10pct"] = abs(summary[f"{key}_error"]) <= TOLERANCE
        summary["cut_error_own_reference"] = summary["cut"] / summary["measured_own_reference"] - 1
        out[strategy] = {
            "components_s": comp,
            "median": summary,
            "runs": runs,
            "unreached": sum(not r["metrics"]["reached"] for r in faulted),
        }
    return out


def table(result: dict[str, Any]) -> str:
    lines = [
        "goodput_rel of the faulted runs, medians over runs: measured; the model steady and cut at the run's end;",
        "slowdown: the fault-free run's step time over the faulted run's steps outside recovery; own: measured / slowdown",
        f"{'strategy':<13} {'runs':>4} {'measured':>9} {'steady':>7} {'error':>7} {'cut':>6} {'error':>7}"
        f" {'slowdown':>9} {'own':>6} {'cut vs own':>11}",
    ]
    for strategy, r in result.items():
        m = r["median"]
        if m is None:
            lines.append(f"{strategy:<13} no faulted run")
            continue
        lines.append(
            f"{strategy:<13} {len(r['runs']):>4} {m['measured']:>9.3f} {m['steady']:>7.3f} {m['steady_error']:>+7.1%} "
            f"{m['cut']:>6.3f} {m['cut_error']:>+7.1%} {m['reference_slowdown']:>9.3f} "
            f"{m['measured_own_reference']:>6.3f} {m['cut_error_own_reference']:>+11.1%}"
        )
    return "\n".join(lines)


def main() -> int:
    goodput = json.loads((RESULTS / "goodput.json").read_text())
    recovery = json.loads((RESULTS / "recovery.json").read_text())
    result = check(goodput, recovery)
    print(table(result))
    path = write_result(
        "model_check",
        {
            "source": {
                "goodput": goodput["environment"],
                "recovery": recovery["environment"],
                "checkpoint_cost_s": goodput["checkpoint_interval"]["checkpoint_cost_s"]["median"],
            },
            "method": (__doc__ or "").strip(),
            "tolerance": TOLERANCE,
            "strategies": result,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
