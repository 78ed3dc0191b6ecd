"""The README's benchmark tables, from bench/results alone: `python -m bench.report [--check FILE ...]`.

Prints, as markdown, what the last `make bench` measured: its stamp and part
times, goodput under faults (small and big state), restart to first commit
with and without warm standbys (local and Slurm), heal bandwidth per
transport, the goodput model against the runs, and the model's projections.
Every number is read from a result file (or computed by `lamplighter plan`'s
model from its defaults, for the projections); a file that some other run
wrote is named as such in the output.

README.md and bench/README.md embed this output between the markers
`<!-- bench-report -->` and `<!-- /bench-report -->`; the README also holds
each demo's table (bench/demo_tables.py). `--write FILE` replaces every such
block FILE holds, and `make test` checks that both files hold what this prints.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from bench import demo_tables
from bench.results_io import GENERATED_NOTE, RESULTS

BEGIN, END = "<!-- bench-report -->", "<!-- /bench-report -->"
# The files `make bench` writes, by part (bench/__main__.py): each should carry the run's stamp.
FILES = {
    "goodput": ("goodput", "recovery"),
    "big": ("goodput_big", "recovery_big"),
    "model": ("model_check",),
    "warm": ("warm_restart",),
    "warm-slurm": ("warm_restart_slurm",),
    "overhead": ("overhead",),
    "quorum": ("lighthouse_quorum",),
    "gpu-probe": ("gpu_probe_cost",),
    "daemon": ("daemon_cost",),
    "heal": ("heal_bandwidth",),
}
# Files computed from other files alone (no measurement): they belong to the run their sources came from.
DERIVED = {"model_check": ("goodput", "recovery")}
HEAL_TRANSPORTS = ("http", "pg", "pg-inplace", "tcp")
PROJECTIONS = ((1024, "8b"), (1024, "70b"), (16384, "8b"), (16384, "70b"))


def load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def rng(cell: dict[str, Any] | None, fmt: str = ".2f") -> str:
    """median [min-max] (n=N) of a results_io.spread cell; '-' when there is none."""
    if not cell or not cell.get("n"):
        return "-"
    return f"{cell['median']:{fmt}} [{cell['min']:{fmt}}-{cell['max']:{fmt}}]"


def stamp_lines(results: Path) -> list[str]:
    run = load(results, "bench_run")
    if run is None:
        return ["No `make bench` run is recorded (bench/results/bench_run.json is missing)."]
    src = run["source"]
    stamp = run["environment"].get("bench_run")
    parts = ", ".join(f"{k} {v / 60:.1f}" for k, v in run["parts_s"].items())
    lines = [
        f"From one `make bench` at commit {src['commit']}, started {src['when']}, on this machine "
        f"({src['host_cpus']} cores, torch {src['torch']}, torchft {src['torchft']}): "
        f"{run['total_s'] / 60:.1f} minutes in all (minutes per part: {parts}).",
    ]
    if run.get("quick"):
        lines.append("**A `--quick` smoke run: not results.**")
    if run.get("failed"):
        lines.append(f"**Parts that failed:** {', '.join(sorted(run['failed']))}.")
    other, recomputed = [], []
    for names in FILES.values():
        for name in names:
            doc = load(results, name)
            if doc is None:
                other.append(f"{name}.json (missing)")
            elif doc["environment"].get("bench_run") == stamp:
                continue
            elif name in DERIVED and all(doc["source"][s].get("bench_run") == stamp for s in DERIVED[name]):
                sources = " and ".join(f"{s}.json" for s in DERIVED[name])
                recomputed.append(
                    f"{name}.json was recomputed from its {sources} at commit {doc['environment'].get('commit')}"
                )
            else:
                other.append(f"{name}.json (commit {doc['environment'].get('commit')}, another run)")
    if other:
        lines.append("Files from other runs: " + "; ".join(other) + ".")
    else:
        lines.append("Every file below comes from that run" + (f" ({'; '.join(recomputed)})." if recomputed else "."))
    return lines


def planned(doc: dict[str, Any], strategy: str, mtbf: float) -> str:
    """Faults each run's schedule held while it trained (first commit to its end), struck or not.

    A fault waits for a healthy group with a live peer: a strategy that is down takes fewer than scheduled."""
    from bench.fault_schedule import schedule

    kinds = doc["config"]["kinds"].split(",")
    counts = []
    for r in doc["runs"]:
        run, m = r["run"], r["metrics"]
        if run["strategy"] != strategy or run["mtbf_s"] != mtbf or m.get("startup_s") is None:
            continue
        trained = run["t_end"] - run["t_start"] - m["startup_s"]
        counts.append(sum(f.at_s <= trained for f in schedule(mtbf, run["seed"], kinds, horizon_s=trained + mtbf)))
    counts.sort()
    return f"{statistics.median(counts):.0f} [{counts[0]}-{counts[-1]}]" if counts else "-"


def goodput_lines(results: Path) -> list[str]:
    rows, pairs, starts = [], [], []
    for name, label in (("goodput", "small"), ("goodput_big", "+1 GB")):
        doc = load(results, name)
        if doc is None:
            continue
        counted = [r["run"]["extra"] for r in doc["runs"] if "warm_starts" in r["run"]["extra"]]
        if counted:
            warm, cold = (sum(e[f"{k}_starts"] for e in counted) for k in ("warm", "cold"))
            starts.append(f"{label}: {warm} warm, {cold} cold in {len(counted)} runs")
        cfg = doc["config"]
        mtbf = f"{cfg['mtbf_s'][0]:g}"
        for strategy, levels in sorted(doc["table"].items()):
            c = levels.get(mtbf)
            if c is None:
                continue
            rows.append(
                f"| {label} | {strategy} | {planned(doc, strategy, float(mtbf))} | {rng(c['faults'], '.0f')} "
                f"| {rng(c['goodput_rel'])} | "
                f"{rng(c['lost_s_per_fault'], '.1f')} | {c['reached']} of {c['runs']} |"
            )
        for pair, levels in sorted(doc["ratios"].items()):
            c = levels.get(mtbf)
            if c is not None:
                pairs.append(
                    f"| {pair.split('/')[1]} | {label} | {rng(c['goodput_samples_per_s'])} | {rng(c['goodput_rel'])} | "
                    f"{rng(c['lost_s_per_fault'])} |"
                )
    doc = load(results, "goodput")
    if doc is None:
        return ["No goodput runs (bench/results/goodput.json is missing)."]
    cfg = doc["config"]
    return [
        f"Goodput under faults: MTBF {', '.join(f'{m:g}' for m in cfg['mtbf_s'])} s, {cfg['kinds']}, "
        f"{cfg['reps']} repetitions, {cfg['workload']['replicas']} replica groups; lamplighter with {cfg['workload'].get('standbys', 0)} warm "
        "standby(s) per node. Median [range] over repetitions; goodput relative to the same strategy's "
        "fault-free run of the same repetition.",
        "",
        "| state | strategy | faults scheduled per run | faults struck per run | goodput / own fault-free "
        "| job-seconds lost per fault | reached target |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "| lamplighter over, paired by repetition | state | goodput, absolute | goodput / own fault-free | "
        "job-seconds lost per fault (below 1: lamplighter loses less) |",
        "|---|---|---|---|---|",
        *pairs,
        *(
            ["", f"lamplighter's trainer starts, as the nodes' standby brokers answered them: {'; '.join(starts)}."]
            if starts
            else []
        ),
    ]


def warm_row(label: str, cold: dict[str, Any], warm: dict[str, Any]) -> str:
    ratio = warm["median"] / cold["median"]
    return f"| {label} | {rng(cold)} s | {rng(warm)} s | {ratio:.2f} | {cold['n']}, {warm['n']} |"


def warm_lines(results: Path) -> list[str]:
    out = [
        "| restart to first commit | cold | warm standby | warm / cold | restarts (cold, warm) |",
        "|---|---|---|---|---|",
    ]
    local = load(results, "warm_restart")
    if local is not None:
        a = local["per_arm"]
        c, w = a["cold"]["first_commit_after_restart_s"], a["warm"]["first_commit_after_restart_s"]
        out.append(warm_row("local mode, the demo job (restart decided -> first commit)", c, w))
    slurm = load(results, "warm_restart_slurm")
    if slurm is not None and "spare" in slurm["summary"] and "cold" in slurm["summary"]:
        s = slurm["summary"]
        c, w = s["cold"]["kill_to_commit_s"], s["spare"]["kill_to_commit_s"]
        out.append(warm_row("Slurm lab, in-job agent (kill -> first commit; warm: the in-job spare)", c, w))
    return out if len(out) > 2 else []


def heal_lines(results: Path) -> list[str]:
    doc = load(results, "heal_bandwidth")
    if doc is None:
        return []
    by = {(r["transport"], r["state_bytes"]): r for r in doc["results"]}
    sizes = sorted({r["state_bytes"] for r in doc["results"]})
    transports = [t for t in HEAL_TRANSPORTS if any(k[0] == t for k in by)]
    out = [
        f"Heal bandwidth, GB/s (a fresh process receives a live peer's state; {doc['config']['reps']} transfer(s) "
        f"each, hash-checked), next to memory copy here and a 400 Gb/s link ({doc['target']['link_GBps']:g} GB/s):",
        "",
        "| state | " + " | ".join(transports) + " | memcpy |",
        "|---|" + "---|" * (len(transports) + 1),
    ]
    for size in sizes:
        cells = []
        for t in transports:
            r = by.get((t, size))
            cells.append("-" if r is None or not r.get("verified") else f"{r['gbps']['median']:.2f}")
        mem = next((m for m in doc["memcpy"].values() if m["bytes"] == size), None)
        cells.append("-" if mem is None else f"{mem['copy_gbps']['median']:.1f}")
        out.append(f"| {size / 1e9:g} GB | " + " | ".join(cells) + " |")
    return out


def cost_lines(results: Path) -> list[str]:
    out = ["| cost | measured |", "|---|---|"]
    over = load(results, "overhead")
    for row in (over or {}).get("rows", []):
        out.append(
            f"| torchft step against plain DDP, {row['model'].split(' (')[0]} model, 2 replicas, no accelerator time "
            f"| {row['torchft_extra_ms_per_step']['median']:+.1f} ms per step "
            f"(throughput x{row['torchft_throughput_vs_ddp']['median']:.2f}) |"
        )
    quorum = load(results, "lighthouse_quorum")
    for row in (quorum or {}).get("rows", []):
        if row["groups"] in (2, 64):
            out.append(f"| Lighthouse quorum, {row['groups']} groups | {rng(row['quorum_s'], '.4f')} s |")
    probe = load(results, "gpu_probe_cost")
    if probe is not None:
        out.append(
            f"| GPU check through amdsmi, {probe['gpus']} simulated GPUs | {probe['cpu_s_per_cycle']:.4f} CPU-s per "
            f"cycle ({100 * probe['core_fraction_at_poll_interval']:.2f}% of a core at 1 s) |"
        )
    daemon = load(results, "daemon_cost")
    if daemon is not None:
        cfg = daemon["config"]
        out.append(
            f"| node daemon, {cfg['gpus']} GPUs, {cfg['trainers']} trainers adopted, {cfg['poll_interval_s']:g} s poll "
            f"| {100 * daemon['cpu_core_fraction_daemon']:.2f}% of a core, {daemon['rss_mb_daemon']:.0f} MB RSS "
            f"({100 * daemon['cpu_core_fraction_daemon_and_workers']:.2f}% and "
            f"{daemon['rss_mb_daemon_and_workers']:.0f} MB with its GPU probe workers) |"
        )
    return out if len(out) > 2 else []


def model_lines(results: Path) -> list[str]:
    doc = load(results, "model_check")
    if doc is None:
        return []
    out = [
        "The goodput model (`lamplighter plan`) fed the measured component times, against the runs "
        f"(tolerance {doc['tolerance']:.0%}; bench/results/model_check.json). Replayed: the model's windows "
        "on each run's own fault times; closed form: `lamplighter plan`'s formula at each run's fault rate, "
        "which also assumes Poisson faults (the benchmark's injector waits for a healthy target).",
        "",
        "| strategy | measured goodput / fault-free | replayed | error | closed form | error |",
        "|---|---|---|---|---|---|",
    ]
    for strategy, s in sorted(doc["strategies"].items()):
        m = s["median"]
        out.append(
            f"| {strategy} | {m['measured']:.3f} | {m['replay']:.3f} | {m['replay_error']:+.1%} "
            f"| {m['closed']:.3f} | {m['closed_error']:+.1%} |"
        )
    return out


def projection_lines() -> list[str]:
    from lamplighter.plan import goodput_model as gm

    out = [
        "Projections of the same model with `lamplighter plan`'s defaults (Llama 3's failure rate; its "
        "assumed costs are listed by `lamplighter plan --help`): goodput, and GPU-hours lost per day.",
        "",
        "| GPUs | model | lamplighter | checkpoint-restart | poll runner (10 s) |",
        "|---|---|---|---|---|",
    ]
    for gpus, size in PROJECTIONS:
        preset = gm.MODELS[size]
        cluster = gm.Cluster(gpus=gpus, group_gpus=preset.group_gpus)
        res = {r.strategy: r for r in gm.compare(cluster, gm.Workload(params=preset.params), gm.Costs())}
        cells = [
            f"{res[k].goodput:.4f} ({res[k].lost_gpu_h_per_day:,.1f} GPU-h/day)"
            for k in ("lamplighter", "ckpt-restart", "poll-10s")
        ]
        out.append(f"| {gpus} | {size} | " + " | ".join(cells) + " |")
    return out


def render(results: Path = RESULTS) -> str:
    blocks = [
        stamp_lines(results),
        goodput_lines(results),
        warm_lines(results),
        heal_lines(results),
        cost_lines(results),
        model_lines(results),
        projection_lines(),
    ]
    body = "\n\n".join("\n".join(b) for b in blocks if b)
    return f"{BEGIN}\n{GENERATED_NOTE}\n{body}\n{END}"


def embedded(text: str, begin: str = BEGIN, end: str = END) -> str | None:
    """The block between the markers, markers included, or None."""
    start, stop = text.find(begin), text.find(end)
    return None if start < 0 or stop < start else text[start : stop + len(end)]


def blocks(results: Path = RESULTS) -> list[tuple[str, str, str]]:
    """(begin, end, text) of every block this module writes: the benchmark's, and each demo's."""
    out = [(BEGIN, END, render(results))]
    for mode in demo_tables.MODES:
        begin, end = demo_tables.markers(mode)
        out.append((begin, end, demo_tables.render_mode(results, mode)))
    from bench import slurm_timings  # it brings the lab's cluster with it: only when asked

    out.append((slurm_timings.BEGIN, slurm_timings.END, slurm_timings.render_block(results)))
    return out


def rewrite(text: str, results: Path = RESULTS) -> tuple[str, int]:
    """The text with every block it holds replaced, and how many it held."""
    found = 0
    for begin, end, block in blocks(results):
        old = embedded(text, begin, end)
        if old is not None:
            text, found = text.replace(old, block), found + 1
    return text, found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n")[0])
    ap.add_argument("--write", type=Path, action="append", default=[], help="replace the blocks in FILE")
    args = ap.parse_args(argv)
    if not args.write:
        print("\n\n".join(block for _, _, block in blocks()))
    for path in args.write:
        text, found = rewrite(path.read_text())
        if not found:
            print(f"{path}: no {BEGIN} ... {END} (or demo-report) block to replace", file=sys.stderr)
            return 2
        path.write_text(text)
        print(f"{path}: {found} generated block(s) rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
