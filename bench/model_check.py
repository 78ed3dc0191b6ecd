"""The goodput model's composition rule against the benchmark's own goodput runs: `python -m bench.model_check`.

Nothing runs: it reads bench/results/goodput.json (the runs under identical faults) and fault_cost.json
(what one fault of each kind costs each strategy, measured one at a time, where faults do not overlap),
and predicts each faulted run's goodput relative to its own fault-free run from the faults that struck it.
No parameter is fitted to the goodput numbers.

The rule (lamplighter/plan/goodput_model.py, `replay`): a struck fault takes its group out for the median
time its kind took that strategy to train again (`back_s`), and stalls every other group for the median
survivors' stall (`stall_s`); a group trains when no window covers it, overlapping windows count once.
Checkpoint-restart: every fault takes the whole job out for its `back_s`, plus half a checkpoint interval
of work redone. A kind that a strategy never recovered from within the per-fault run's cap (the poll
runner's hangs) holds its group until a later fault strikes it (a kill of the hung process: the
strategy restarts what exited) or to the end of the run. The dense goodput runs are where faults overlap and
strike recovering groups: this checks that the per-fault costs compose into goodput there (the tolerance
is 10%), which is what `lamplighter plan` does at a real cluster's rate.
"""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

from bench.results_io import RESULTS, write_result
from lamplighter.plan import goodput_model as gm

TOLERANCE = 0.10


def windows(costs: dict[str, Any], strategy: str, tau_s: float) -> tuple[dict[str, float], dict[str, float]]:
    """(out_s, stall_s) per kind for one strategy, from fault_cost.json's table."""
    out, stall = {}, {}
    for kind, per in costs["table"].items():
        cell = per.get(strategy)
        if cell is None:
            continue
        back = cell["back_s"]["median"] if cell.get("back_s") and cell["never"] < cell["n"] else math.inf
        st = cell["stall_s"]["median"] if cell.get("stall_s") else 0.0
        if strategy == "ckpt-restart":
            out[kind] = stall[kind] = back + tau_s / 2  # the whole job, and the work since the last checkpoint
        else:
            out[kind], stall[kind] = back, st
    return out, stall


def predict(entry: dict[str, Any], costs: dict[str, Any], tau_s: float) -> dict[str, Any] | None:
    m, rec = entry["metrics"], entry["record"]
    if m["startup_s"] is None or not m["train_s"] or entry.get("goodput_rel") is None:
        return None
    start = rec["t_start"] + m["startup_s"]
    end = start + m["train_s"]
    out, stall = windows(costs, entry["strategy"], tau_s)
    struck = [f for f in rec["faults"] if f["outcome"] == "struck" and f["kind"] in out]
    groups = rec["replicas"]
    timed = [(f["t_injected"], f["index"], f["kind"]) for f in struck]
    replayed = gm.replay(groups, timed, start, end, out, stall)
    return {
        "rep": entry["rep"],
        "struck": len(struck),
        "measured": entry["goodput_rel"],
        "replay": replayed,
        "error": replayed / entry["goodput_rel"] - 1 if entry["goodput_rel"] else None,
    }


def check(goodput: dict[str, Any], costs: dict[str, Any]) -> dict[str, Any]:
    tau = (goodput.get("checkpoint_interval", {}).get("tau_s") or {}).get("median") or 0.0
    out: dict[str, Any] = {}
    for strategy in sorted({r["strategy"] for r in goodput["runs"] if r["faulted"]}):
        runs = [r for r in goodput["runs"] if r["faulted"] and r["strategy"] == strategy]
        preds = [p for p in (predict(r, costs, tau) for r in runs) if p is not None]
        if not preds:
            out[strategy] = {"median": None, "runs": []}
            continue
        med = {k: statistics.median(p[k] for p in preds) for k in ("measured", "replay")}
        med["error"] = med["replay"] / med["measured"] - 1
        med["within_tolerance"] = abs(med["error"]) <= TOLERANCE
        out_s, stall_s = windows(costs, strategy, tau)
        finite = {"out_s": _finite(out_s), "stall_s": _finite(stall_s)}  # JSON has no infinity: None is "never"
        out[strategy] = {"windows": finite, "median": med, "runs": preds}
    return out


def _finite(d: dict[str, float]) -> dict[str, float | None]:
    return {k: v if math.isfinite(v) else None for k, v in d.items()}


def main() -> int:
    goodput = json.loads((RESULTS / "goodput.json").read_text())
    costs = json.loads((RESULTS / "fault_cost.json").read_text())
    result = check(goodput, costs)
    if not any(r["median"] for r in result.values()):
        return 1
    for strategy, r in result.items():
        m = r["median"]
        print(
            f"{strategy:<13} "
            + ("no run" if m is None else f"measured {m['measured']:.3f} replay {m['replay']:.3f} ({m['error']:+.1%})")
        )
    path = write_result(
        "model_check",
        {
            "source": {"goodput": goodput["environment"], "fault_cost": costs["environment"]},
            "method": (__doc__ or "").strip(),
            "tolerance": TOLERANCE,
            "strategies": result,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
