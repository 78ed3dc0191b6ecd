"""From the runs of bench.goodput to goodput.json, recovery.json and the ratio table, medians with ranges.

Goodput ratios are paired: lamplighter's run and a baseline's run of the same
repetition and MTBF (the same fault schedule) give one ratio; the table
shows their median and range over repetitions. Recovery ratios compare the
medians of all faults of a kind (faults are not paired: each strategy's
schedule plays out differently once a run diverges).
"""

from __future__ import annotations

from typing import Any

from bench.results_io import spread, write_result

BASELINES = ("ckpt-restart", "poll-10s")
PHASES = ("detect_s", "survivors_commit_s", "failed_runs_s", "failed_commits_s", "progress_s")
SUBSTRATE_NOTE = (
    "lamplighter ran in local mode (`lamplighter local`: same trainer, same faults, bare metal, no Slurm): its Slurm "
    "path (submit + node daemons) was not usable when this benchmark was built. The two baselines ran on the real "
    "Slurm test cluster on this machine, paying Slurm's scheduling latency (~1 s per start) that local mode does not."
)

SLURM_NOTE = (
    "All three strategies ran on real Slurm test clusters on this machine: lamplighter with `submit` and its node "
    "daemon (`lamplighter supervise`) and warm standbys on every node of one lab per arm, reset between runs; "
    "the baselines on a cluster of their own."
)


def maybe_spread(values: list[float | None]) -> dict[str, Any] | None:
    vals = [v for v in values if v is not None]
    out: dict[str, Any] | None = spread(vals) if vals else None
    never = len(values) - len(vals)
    if out is not None:
        out["never"] = never
    elif never:
        out = {"never": never, "n": 0}
    return out


def lost_per_fault(metrics: dict[str, Any], rel: float | None) -> float | None:
    """Seconds of the whole job's fault-free training that each fault cost: (1 - goodput_rel) x training time / faults.

    Faults per run differ by strategy (a fault needs a healthy target with a live peer, and the poll runner's
    hung replica is never healthy again), so goodput at one MTBF compares unequal exposure; this does not.
    """
    faults, train_s = metrics["faults"], metrics["train_s"]
    if not faults or rel is None or not train_s:
        return None
    return float(train_s * (1.0 - rel) / faults)


def mkey(m: float | None) -> str:
    return "fault-free" if m is None else f"{m:g}"


def goodput_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in rows:
        run = r["run"]
        if run["extra"].get("scenario"):
            continue  # a single-fault anatomy run, not part of the goodput schedule
        by[(run["strategy"], mkey(run["mtbf_s"]), run["rep"])] = r
    # goodput relative to the same strategy's fault-free run of the same repetition
    for (s, _m, rep), r in by.items():
        free = by.get((s, "fault-free", rep))
        g, g0 = r["metrics"]["goodput_samples_per_s"], free and free["metrics"]["goodput_samples_per_s"]
        r["metrics"]["goodput_rel"] = rel = g / g0 if g and g0 else None
        r["metrics"]["lost_s_per_fault"] = lost_per_fault(r["metrics"], rel)
    strategies = sorted({k[0] for k in by})
    levels = sorted({k[1] for k in by}, key=lambda x: float("inf") if x == "fault-free" else float(x))
    table: dict[str, Any] = {}
    for s in strategies:
        for m in levels:
            rs = [r for (s2, m2, _), r in sorted(by.items()) if s2 == s and m2 == m]
            if not rs:
                continue
            table.setdefault(s, {})[m] = {
                "runs": len(rs),
                "reached": sum(1 for r in rs if r["metrics"]["reached"]),
                **{
                    k: maybe_spread([r["metrics"][k] for r in rs])
                    for k in (
                        "goodput_samples_per_s",
                        "goodput_rel",
                        "wall_to_target_s",
                        "train_s",
                        "faults",
                        "steps_lost_per_fault",
                        "lost_s_per_fault",
                    )
                },
            }
    ratios: dict[str, Any] = {}
    for b in BASELINES:
        for m in levels:
            for metric in ("goodput_samples_per_s", "goodput_rel", "lost_s_per_fault"):
                vals = []
                for (s, m2, rep), r in by.items():
                    other = by.get((b, m, rep))
                    if s == "lamplighter" and m2 == m and other:
                        a, c = r["metrics"][metric], other["metrics"][metric]
                        if a and c:
                            vals.append(a / c)
                if vals:
                    ratios.setdefault(f"lamplighter/{b}", {}).setdefault(m, {})[metric] = spread(vals)
    return {"table": table, "ratios": ratios}


def recovery_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    faults: dict[tuple[str, str], list[tuple[bool, dict[str, Any]]]] = {}
    for r in rows:
        scenario = bool(r["run"]["extra"].get("scenario"))
        for a in r["metrics"]["anatomy"]:
            faults.setdefault((r["run"]["strategy"], a["kind"]), []).append((scenario, a))
    table: dict[str, Any] = {}
    for (s, kind), fs in sorted(faults.items()):
        # A goodput run ends at its target, often before a slow recovery: there a missing phase is censored,
        # not "never". Only a recovery run (it waits for the recovery, up to its timeout) can say never.
        per = {p: maybe_spread([f[p] for sc, f in fs if sc or f[p] is not None]) for p in PHASES}
        table.setdefault(kind, {})[s] = {"faults": len(fs), "from_recovery_runs": sum(sc for sc, _ in fs), **per}
    ratios: dict[str, Any] = {}
    for kind, per in table.items():
        mine = per.get("lamplighter")
        if not mine:
            continue
        for b in BASELINES:
            other = per.get(b)
            if not other:
                continue
            for p in ("progress_s", "failed_commits_s"):
                ratios.setdefault(f"lamplighter/{b}", {}).setdefault(kind, {})[p] = phase_ratio(mine[p], other[p])
    return {"table": table, "ratios": ratios}


def phase_ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | str | None:
    """Ratio of medians; 'baseline never' when the baseline never got there in most of its faults (within a
    recovery run's window; a goodput run that ended first does not count)."""
    if a is None or b is None:
        return None
    if b.get("n", 0) == 0 or b.get("never", 0) > b.get("n", 0):
        return "baseline never"
    if a.get("n", 0) == 0:
        return "lamplighter never"
    return round(a["median"] / b["median"], 3) if b["median"] else None


def ratio_lines(good: dict[str, Any], rec: dict[str, Any], reps: int) -> list[str]:
    """The short Markdown table of ratios for the README."""
    lines = [
        "| lamplighter over | MTBF / fault | goodput (relative to own fault-free), median [range] | "
        "goodput (absolute samples/s), median [range] | job-seconds lost per fault (below 1: lamplighter loses less) |",
        "|---|---|---|---|---|",
    ]
    for pair, per in good["ratios"].items():
        for m, d in per.items():
            if m == "fault-free":
                continue
            rel, ab, lost = d.get("goodput_rel"), d.get("goodput_samples_per_s"), d.get("lost_s_per_fault")
            lines.append(f"| {pair.split('/')[1]} | MTBF {m} s | {fmt(rel)} | {fmt(ab)} | {fmt(lost)} |")
        free = per.get("fault-free", {}).get("goodput_samples_per_s")
        if free:
            lines.append(f"| {pair.split('/')[1]} | fault-free | 1 (by definition) | {fmt(free)} | - |")
    lines += [
        "",
        "| lamplighter over | fault kind | time until the job commits new steps | "
        "time until the failed replica commits again |",
        "|---|---|---|---|",
    ]
    for pair, per in rec["ratios"].items():
        for kind, d in per.items():
            lines.append(f"| {pair.split('/')[1]} | {kind} | {d.get('progress_s')} | {d.get('failed_commits_s')} |")
    lines.append("")
    lines.append(
        f"Goodput ratios: paired runs (same repetition, same fault schedule), {reps} repetitions. "
        "Recovery ratios: ratio of the medians over all faults of that kind (counts in recovery.json). "
        "Below 1 is better for recovery time, above 1 for goodput."
    )
    return lines


def tables_md(good: dict[str, Any], rec: dict[str, Any], k_choice: dict[str, Any]) -> list[str]:
    """Per-strategy goodput and recovery medians, for the README."""
    lines = [
        "| strategy | MTBF s | runs (reached target) | faults/run | goodput, samples/s | goodput / own fault-free | "
        "training time, s | job-seconds lost per fault | steps lost per fault |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s, per in good["table"].items():
        for m, d in per.items():
            lines.append(
                f"| {s} | {m} | {d['runs']} ({d['reached']}) | {fmt(d['faults'], 0)} | "
                f"{fmt(d['goodput_samples_per_s'], 0)} | {fmt(d['goodput_rel'])} | {fmt(d['train_s'], 1)} | "
                f"{fmt(d.get('lost_s_per_fault'), 1)} | {fmt(d['steps_lost_per_fault'], 1)} |"
            )
    k = k_choice.get("k_steps")
    if k and k.get("n"):
        lines += [
            "",
            f"ckpt-restart's checkpoint interval (Young/Daly): K = {fmt(k, 1)} steps, tau = "
            f"{fmt(k_choice['tau_s'])} s, checkpoint cost {fmt(k_choice['checkpoint_cost_s'], 3)} s.",
        ]
    lines += [
        "",
        "| fault | strategy | faults | detected | survivors commit | failed replica runs | "
        "failed replica commits | job makes new progress |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind, per in rec["table"].items():
        for s, d in per.items():
            cells = " | ".join(phase_md(d[p]) for p in PHASES)
            lines.append(f"| {kind} | {s} | {d['faults']} | {cells} |")
    lines.append("")
    lines.append(
        "Recovery cells: median [range] seconds after the fault, over all faults of that kind (goodput runs and "
        "one recovery run); 'never': it did not happen within the recovery run's 40 s window; a goodput run that "
        "reached its target first leaves that phase out."
    )
    return lines


def phase_md(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    never = f" +{d['never']} never" if d.get("never") else ""
    if not d.get("n"):
        return f"never ({d['never']})"
    return f"{d['median']:.1f} [{d['min']:.1f}-{d['max']:.1f}]{never}"


def fmt(s: dict[str, Any] | None, digits: int = 2) -> str:
    if not s or not s.get("n"):
        return "-"
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}-{s['max']:.{digits}f}] (n={s['n']})"


def write_all(rows: list[dict[str, Any]], config: dict[str, Any], suffix: str = "") -> list[str]:
    """goodput{suffix}.json and recovery{suffix}.json with their plots; the Markdown tables, returned."""
    from bench.plots import plot_goodput, plot_recovery

    good = goodput_table(rows)
    rec = recovery_table(rows)
    ckpt = [r["run"]["extra"].get("checkpoint") for r in rows if r["run"]["strategy"] == "ckpt-restart"]
    k_choice = {
        "rule": "Young/Daly: tau = sqrt(2 * C * MTBF), C = the trainer's measured cost of its first checkpoint",
        "k_steps": maybe_spread([c["k_steps"] for c in ckpt if c]),
        "tau_s": maybe_spread([c["tau_s"] for c in ckpt if c]),
        "checkpoint_cost_s": maybe_spread([c["median_cost_s"] for c in ckpt if c]),
    }
    lines = ratio_lines(good, rec, int(config.get("reps", 0))) + [""] + tables_md(good, rec, k_choice)
    note = SUBSTRATE_NOTE if config.get("lamplighter_mode", "local") == "local" else SLURM_NOTE
    write_result(
        f"goodput{suffix}",
        {
            "config": config,
            "substrate": note,
            "checkpoint_interval": k_choice,
            **good,
            "ratio_table_md": lines,
            "runs": rows,
        },
    )
    write_result(f"recovery{suffix}", {"config": config, "substrate": note, **rec})
    plot_goodput(good, f"goodput{suffix}")
    plot_recovery(rec, f"recovery{suffix}")
    return lines
