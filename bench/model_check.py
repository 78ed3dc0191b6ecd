"""The goodput model (lamplighter/plan/goodput_model.py) against the benchmark's own measured goodput.

    python -m bench.model_check          # reads bench/results/{goodput,recovery}.json, writes model_check.json

Nothing runs: the model is fed the benchmark's configuration (its groups of one process each, one
"GPU" per group and per node) and the component times the benchmark measured (recovery.json: medians
over every fault of a kind), and predicts each faulted goodput run's goodput_rel from the faults that
run had. No parameter is fitted to the goodput numbers.

Two predictions per run, from the same component times and the model's composition rule (a fault takes
its group out, stalls the others; overlapping windows count once):
- replay: the rule applied to the run's own fault times (goodput_model.replay). The benchmark's
  injector strikes only a healthy group with a live peer, one fault per MTBF window at most, so its
  faults are not a Poisson process: this is the prediction the check is judged by.
- closed: `lamplighter plan`'s closed form at the run's fault rate per running group-second (training
  group-seconds minus the model's own out time of each fault). It adds the Poisson assumption, which
  this injector does not meet; tests/plan checks the closed form against replayed Poisson faults.

And one look at the measurement's reference, from the measurements alone: `reference_slowdown` is the
fault-free run's step time over this run's step time outside every recovery window (fault to
progress_s); `measured_own_reference` divides goodput_rel by it, i.e. against the faulted run's own
fault-free pace. The model assumes the two paces are equal.

Measured components, and the model term each one sets:
- detect: recovery's detect_s (per kind);  group/job restart: failed_commits_s - detect_s, per kind
  (it includes the heal or the checkpoint read, both milliseconds for this model, and one step; after a
  hang also the end of the stopped trainer, which waits out the kill grace: 3.2 s against 1.3 s here);
- survivors' stall: survivors_commit_s - half a fault-free step (the wait for the next commit a
  survivor would have had anyway);
- checkpoint cost C: goodput.json's checkpoint_interval.checkpoint_cost_s; interval: the benchmark's
  own rule, sqrt(2 C MTBF) at the configured MTBF (16 s for the fault-free run);
- poll runner: the model's detection (poll / 2), not the measured one; hangs hold the group until
  the run's end (its "time limit");
- checkpoint-restart: every group is out detect + restart + tau / 2 (the expected work since the last
  checkpoint), and checkpoints cost C per tau of compute, in the faulted and the fault-free run alike.
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
    cell = table.get(kind, {}).get(strategy, {}).get(key) or {}
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
        # A hung trainer is stopped: ending it takes the kill's grace before the restart can begin.
        try:
            out["hang_restart_s"] = median_of(t, "hang", strategy, "failed_commits_s") - out["hang_detect_s"]
        except ValueError:  # no hung group committed again within its run: take a kill's restart
            out["hang_restart_s"] = out["restart_s"]
    return out


def costs_for(strategy: str, comp: dict[str, float], interval_s: float, time_limit_s: float) -> gm.Costs:
    """The model's cost inputs for the benchmark. State is 1 byte: heal and read are inside the restart."""
    inf = math.inf
    # The plan has one restart time; a hung group's longer one (ending a stopped process) goes with its detection.
    hang_out = comp.get("hang_detect_s", inf) + comp.get("hang_restart_s", 0.0) - comp["restart_s"]
    if strategy == "ckpt-restart":
        return gm.Costs(
            ckpt_write_bps=1.0 / comp["checkpoint_s"],  # so that C = S / bandwidth = the measured cost
            ckpt_read_bps=inf,
            ckpt_interval_s=interval_s,
            job_restart_s=comp["restart_s"],
            ckpt_detect_s=comp["detect_s"],
            ckpt_hang_detect_s=hang_out,
        )
    return gm.Costs(
        detect_s=comp["detect_s"],
        hang_detect_s=hang_out,
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


def windows(strategy: str, comp: dict[str, float], tau: float) -> tuple[dict[str, float], dict[str, float]]:
    """(out_s, stall_s) per fault kind: how long a fault takes its group out, and stalls the others."""
    stall = {"kill": comp["stall_s"], "hang": comp["hang_stall_s"]}
    if strategy == "poll-10s":  # the next poll sees an exit; a hang holds the group to the run's end
        return {"kill": POLL_S / 2 + comp["restart_s"], "hang": math.inf}, stall
    out = {"kill": comp["detect_s"] + comp["restart_s"], "hang": comp["hang_detect_s"] + comp["hang_restart_s"]}
    if strategy == "ckpt-restart":  # the whole job goes down, and loses half an interval of work
        down = {k: v + tau / 2 for k, v in out.items()}
        return down, down
    return out, stall


def predict_run(
    run: dict[str, Any],
    metrics: dict[str, Any],
    comp: dict[str, float],
    c_s: float,
    mtbfs: list[float],
    ff_step_s: float,
) -> dict[str, Any]:
    """Replayed and closed-form predictions of one faulted run's goodput_rel."""
    strategy, groups, train_s = run["strategy"], run["replicas"], metrics["train_s"]
    faults = run["faults"]
    hangs = sum(f["kind"] == "hang" for f in faults)
    start = run["t_start"] + metrics["startup_s"]  # the first commit: goodput counts from there
    end = start + train_s
    tau = math.sqrt(2 * c_s * run["mtbf_s"])
    tau_ff = math.sqrt(2 * c_s * max(mtbfs))  # the fault-free run checkpointed at the largest MTBF's interval
    # The fault-free reference of the same strategy: ckpt-restart still pays its checkpoints there.
    overhead = (1 - c_s / (tau + c_s)) / (1 - c_s / (tau_ff + c_s)) if strategy == "ckpt-restart" else 1.0
    out_s, stall_s = windows(strategy, comp, tau)
    timed = [(f["t_injected"], f["index"], f["kind"]) for f in faults]
    replayed = gm.replay(groups, timed, start, end, out_s, stall_s) * overhead
    # closed: the plan's formula at the run's rate per running second of a group (of the job, for
    # checkpoint-restart, whose every fault takes all groups): the replayed time outside its own windows.
    if strategy == "ckpt-restart":
        running = gm.replay(1, [(t, 0, k) for t, _, k in timed], start, end, out_s, stall_s) * train_s
        rate = len(faults) / running / groups  # per "GPU": the job's rate is groups x this
    else:
        running = groups * train_s - sum(min(out_s[k], end - t) for t, _, k in timed)
        rate = len(faults) / running
    costs = costs_for(strategy, {**comp, "checkpoint_s": c_s}, tau, train_s)
    closed = MODEL_FN[strategy](bench_cluster(groups, rate, hangs / len(faults)), BENCH_WORK, costs).goodput
    if strategy == "ckpt-restart":
        closed /= 1 - c_s / (tau_ff + c_s)
    # The reference: the fault-free run's step time against this run's steps outside every recovery window.
    recovering = gm.covered(
        [
            (f["t_injected"], f["t_injected"] + (a["progress_s"] if a["progress_s"] is not None else math.inf))
            for a, f in zip(metrics["anatomy"], faults, strict=True)
        ],
        start,
        end,
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
        "replay": replayed,
        "closed": closed,
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
        for key in ("measured", "replay", "closed", "reference_slowdown", "measured_own_reference"):
            summary[key] = statistics.median(r[key] for r in runs)
        for key in ("replay", "closed"):
            summary[f"{key}_error"] = summary[key] / summary["measured"] - 1
            summary[f"{key}_within_10pct"] = abs(summary[f"{key}_error"]) <= TOLERANCE
        summary["replay_error_own_reference"] = summary["replay"] / summary["measured_own_reference"] - 1
        out[strategy] = {
            "components_s": comp,
            "median": summary,
            "runs": runs,
            "unreached": sum(not r["metrics"]["reached"] for r in faulted),
        }
    return out


def table(result: dict[str, Any]) -> str:
    lines = [
        "goodput_rel of the faulted runs, medians over runs: measured; the model replayed on the run's faults, and",
        "its closed form at the run's rate; slowdown: the fault-free run's step time over the faulted run's steps",
        "outside recovery; own: measured / slowdown",
        f"{'strategy':<13} {'runs':>4} {'measured':>9} {'replay':>7} {'error':>7} {'closed':>7} {'error':>7}"
        f" {'slowdown':>9} {'own':>6} {'replay vs own':>14}",
    ]
    for strategy, r in result.items():
        m = r["median"]
        if m is None:
            lines.append(f"{strategy:<13} no faulted run")
            continue
        lines.append(
            f"{strategy:<13} {len(r['runs']):>4} {m['measured']:>9.3f} {m['replay']:>7.3f} {m['replay_error']:>+7.1%} "
            f"{m['closed']:>7.3f} {m['closed_error']:>+7.1%} {m['reference_slowdown']:>9.3f} "
            f"{m['measured_own_reference']:>6.3f} {m['replay_error_own_reference']:>+14.1%}"
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
