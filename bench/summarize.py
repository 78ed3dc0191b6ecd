"""From the runs of bench.goodput to goodput.json and its plot: medians with ranges, and every run as it went.

Goodput is committed samples per second over each run's window. The headline divides it by the
repetition's one yardstick, plain DDP with no checkpoint and no fault (`goodput_abs`), so that what
fault tolerance costs when nothing fails (torchft's per-step quorum, checkpoint-restart's checkpoints)
shows; the second column divides it by the strategy's own fault-free run (`goodput_rel`). Ratios between
strategies are paired: two runs of the same repetition got the same faults (the schedule, delivered
exactly), and each pair gives one ratio; tables show the median and range over repetitions.
"""

from __future__ import annotations

from typing import Any

from bench.goodput import OWN_FAULT_FREE, STRATEGIES, YARDSTICK
from bench.results_io import spread, write_result

NOTE = (
    "All strategies ran on real Slurm test clusters on this machine: lamplighter with `submit` and its node "
    "daemon (`lamplighter supervise`) on every node of one lab per arm, reset between runs, every trainer "
    "start cold; the baselines on a cluster of their own."
)


def maybe_spread(values: list[float | None]) -> dict[str, Any] | None:
    vals = [v for v in values if v is not None]
    return spread(vals) if vals else None


def run_entry(row: dict[str, Any]) -> dict[str, Any]:
    """One run as goodput.json lists it: who, which repetition, each fault with its outcome, the rate."""
    run, m = row["run"], row["metrics"]
    t0 = None if m["startup_s"] is None else run["t_start"] + m["startup_s"]  # the first commit
    faults = [
        {
            "t": f["t_scheduled"],
            "group": f["index"],
            "kind": f["kind"],
            "outcome": f["outcome"],
            "why": f["why"],
            "t_delivered": None if t0 is None else round(f["t_injected"] - t0, 3),
        }
        for f in run["faults"]
    ]
    return {
        "strategy": run["strategy"],
        "rep": run["rep"],
        "faulted": run["mtbf_s"] is not None,
        "faults": faults,
        "samples_per_s": m["samples_per_s"],
        "train_s": m["train_s"],
        "steps_lost": m["steps_lost"],
        "record": run,
        "metrics": m,
    }


def degraded_ratio(run: dict[str, Any]) -> float | None:
    """A survivor's median step period with fewer replicas committing over that with all of them: 1.0 when the
    machine's effect is removed (survivors on a shared CPU would otherwise run faster with a group out)."""
    by, replicas = run["metrics"].get("step_period_by_participants") or {}, run["record"].get("replicas")
    if not by or replicas is None:
        return None
    full = by.get(str(replicas))
    fewer = [v for n, v in by.items() if int(n) < replicas]
    if not full or not fewer:
        return None
    n = sum(v["n"] for v in fewer)
    return sum(v["median_s"] * v["n"] for v in fewer) / n / full["median_s"]


def add_ratios(runs: list[dict[str, Any]]) -> None:
    """goodput_abs (over the repetition's yardstick) and goodput_rel (over the strategy's own fault-free run)."""
    free = {(r["strategy"], r["rep"]): r["samples_per_s"] for r in runs if not r["faulted"]}
    for r in runs:
        base = free.get((YARDSTICK, r["rep"]))
        own = free.get((OWN_FAULT_FREE.get(r["strategy"], r["strategy"]), r["rep"])) if r["faulted"] else None
        rate = r["samples_per_s"]
        r["goodput_abs"] = rate / base if rate and base else None
        r["goodput_rel"] = rate / own if rate and own else None


def goodput_table(runs: list[dict[str, Any]]) -> dict[str, Any]:
    faulted = [r for r in runs if r["faulted"]]
    table: dict[str, Any] = {}
    for s in sorted({r["strategy"] for r in faulted}):
        rs = [r for r in faulted if r["strategy"] == s]
        table[s] = {
            "runs": len(rs),
            "samples_per_s": maybe_spread([r["samples_per_s"] for r in rs]),
            "goodput_abs": maybe_spread([r["goodput_abs"] for r in rs]),
            "goodput_rel": maybe_spread([r["goodput_rel"] for r in rs]),
            "delivered": maybe_spread([len(r["faults"]) for r in rs]),
            "struck": maybe_spread([sum(f["outcome"] == "struck" for f in r["faults"]) for r in rs]),
            "absorbed": maybe_spread([sum(f["outcome"] == "absorbed" for f in r["faults"]) for r in rs]),
            "steps_lost": maybe_spread([r["steps_lost"] for r in rs]),
            "degraded_step_period_ratio": maybe_spread([degraded_ratio(r) for r in rs]),
        }
    fault_free: dict[str, Any] = {}
    for s in sorted({r["strategy"] for r in runs if not r["faulted"]}):
        rs = [r for r in runs if not r["faulted"] and r["strategy"] == s]
        fault_free[s] = {
            "runs": len(rs),
            "samples_per_s": maybe_spread([r["samples_per_s"] for r in rs]),
            "over_yardstick": maybe_spread([r["goodput_abs"] for r in rs]),
        }
    ratios: dict[str, Any] = {}
    by = {(r["strategy"], r["rep"]): r for r in faulted}
    ours = ("lamplighter", "lamplighter-spare")
    for head in ours:
        for b in (s for s in STRATEGIES if s not in ours):
            vals = []
            for (s, rep), r in sorted(by.items()):
                other = by.get((b, rep))
                if s == head and other and r["samples_per_s"] and other["samples_per_s"]:
                    vals.append(r["samples_per_s"] / other["samples_per_s"])
            if vals:
                ratios[f"{head}/{b}"] = spread(vals)
    return {"table": table, "fault_free": fault_free, "ratios": ratios}


def same_faults(runs: list[dict[str, Any]]) -> bool:
    """Every faulted run of a repetition got the same (time, group, kind) list: the benchmark's premise."""
    seen: dict[int, list[tuple[Any, ...]]] = {}
    for r in runs:
        if not r["faulted"]:
            continue
        faults = [(f["t"], f["group"], f["kind"]) for f in r["faults"]]
        if seen.setdefault(r["rep"], faults) != faults:
            return False
    return True


def write_all(
    rows: list[dict[str, Any]], schedules: list[dict[str, Any]], config: dict[str, Any], suffix: str = ""
) -> dict[str, Any]:
    """goodput{suffix}.json and its plot; returns the summary."""
    from bench.plots import plot_goodput

    runs = [run_entry(r) for r in rows]
    add_ratios(runs)
    good = goodput_table(runs)
    ckpt = [r["record"]["extra"].get("checkpoint") for r in runs if r["strategy"] == "ckpt-restart"]
    k_choice = {
        "rule": "Young/Daly: tau = sqrt(2 * C * MTBF), C = the trainer's measured cost of its first checkpoint, "
        "MTBF = the repetition's schedule's (its window over its faults)",
        "k_steps": maybe_spread([c["k_steps"] for c in ckpt if c]),
        "tau_s": maybe_spread([c["tau_s"] for c in ckpt if c]),
        "checkpoint_cost_s": maybe_spread([c["median_cost_s"] for c in ckpt if c]),
    }
    doc = {
        "config": config,
        "substrate": NOTE,
        "same_faults_in_every_repetition": same_faults(runs),
        "schedules": schedules,
        "checkpoint_interval": k_choice,
        **good,
        "runs": runs,
    }
    write_result(f"goodput{suffix}", doc)
    plot_goodput(runs, f"goodput{suffix}")
    return doc
