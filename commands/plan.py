"""`lamplighter plan`: what faults cost a job under lamplighter, checkpoint-restart and a 10 s poll runner.

A goodput model (lamplighter/plan/goodput_model.py holds every formula): from the cluster size, a
failure rate (default: Llama 3's 419 unexpected interruptions in 54 days on 16,384 GPUs), the model's
state size, checkpoint bandwidth and restart costs, it prints per strategy the goodput (the fraction of
plain synchronous training's fault-free throughput kept) and the GPU-hours lost per day, as a range:
low, central and high, each with every uncertain input (plan/ranges.py) at its pessimistic, central or
optimistic value, which it names, next to published figures. An input given on the command line holds
in all three.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from lamplighter.plan import goodput_model as gm
from lamplighter.plan import measured as ms
from lamplighter.plan import ranges as rg

HELP = "goodput and lost GPU-hours a day of lamplighter, checkpoint-restart, a poll runner and in-job restart (a model)"
EPILOG = """\
examples:
  lamplighter plan --gpus 16384 --model 70b
  lamplighter plan --gpus 1024 --model 8b --ckpt-write-gbs 200 --json
  lamplighter plan --gpus 16384 --stall-s 30 --hang-share 0.1   pin two of the uncertain inputs
  lamplighter plan --model 70b --sweep                 goodput at 64 .. 16384 GPUs
  lamplighter plan --plot goodput.png                  8B and 70B, 64 .. 16384 GPUs (needs matplotlib)
  lamplighter plan --results bench/results             the measured inputs from a fresh `make bench` run

exit status: 0 printed, 1 the plot could not be drawn, 2 bad input
"""

D = gm.Costs()  # the defaults, for the help texts
VARIES = "(default: varies with the scenario, see the table)"
MEASURED = "(default: measured, see the table's sources)"


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0 or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be positive, not {text}")
        return value

    return parse


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def _share(text: str) -> float:
    value = _non_negative(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be within 0..1, not {text}")
    return value


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help=HELP,
        description=__doc__ or "",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pos_int, pos = _positive(int), _positive(float)
    g = p.add_argument_group("cluster and faults")
    g.add_argument("--gpus", type=pos_int, default=gm.LLAMA3_GPUS, help="GPUs in the job (default: Llama 3's 16384)")
    g.add_argument("--gpus-per-node", type=pos_int, default=8, help="GPUs per node (default 8: an MI325X/H100 node)")
    g.add_argument(
        "--group-gpus",
        type=pos_int,
        default=None,
        help="GPUs per torchft replica group; a fault takes out one group, or a node's groups "
        "(default by model, assumed: 8b 8, 70b 32)",
    )
    rate = g.add_mutually_exclusive_group()
    rate.add_argument(
        "--failures-per-gpu-day",
        type=_non_negative,
        default=None,
        help=f"unexpected interruptions per GPU per day (default {gm.LLAMA3_FAILURES_PER_GPU_S * gm.DAY:.3g}: "
        "Llama 3's 419 in 54 days on 16384 GPUs)",
    )
    rate.add_argument(
        "--failures-per-node-day",
        type=_non_negative,
        default=None,
        help="the same per node per day (default: Llama 3's rate times --gpus-per-node)",
    )
    g.add_argument(
        "--hang-share", type=_share, default=None, help=f"share of faults that hang rather than exit, 0..1 {VARIES}"
    )
    g.add_argument(
        "--nonlocal-share",
        type=_share,
        default=None,
        help=f"share of faults one group's restart cannot absorb (network, software, corruption): a job restart "
        f"from the fallback checkpoint for the torchft strategies {VARIES}",
    )
    w = p.add_argument_group("model")
    w.add_argument("--model", choices=sorted(gm.MODELS), default="70b", help="model preset (default 70b: Llama 3)")
    w.add_argument("--params-b", type=pos, default=None, help="parameters in billions (default: the preset's)")
    w.add_argument(
        "--bytes-per-param",
        type=pos,
        default=gm.BYTES_PER_PARAM,
        help="state bytes per parameter (default 14: bf16 weights 2 + fp32 master 4 + Adam moments 4 + 4)",
    )
    c = p.add_argument_group("checkpoint-restart")
    c.add_argument(
        "--ckpt-write-gbs",
        type=pos,
        default=None,
        help=f"the job's aggregate checkpoint write bandwidth, GB/s {VARIES}",
    )
    c.add_argument(
        "--ckpt-read-gbs",
        type=pos,
        default=None,
        help="the job's aggregate checkpoint read bandwidth, GB/s (default: the write bandwidth)",
    )
    c.add_argument(
        "--ckpt-interval-s",
        type=pos,
        default=None,
        help="seconds of compute between checkpoints (default: Young/Daly, sqrt(2 x write time x job MTBF))",
    )
    c.add_argument(
        "--job-restart-s",
        type=_non_negative,
        default=None,
        help=f"seconds from a detected fault to the whole job running again, reads excluded {VARIES}",
    )
    c.add_argument(
        "--ckpt-detect-s",
        type=_non_negative,
        default=D.ckpt_detect_s,
        help="seconds until an exit ends the job (default 1: srun --kill-on-bad-exit)",
    )
    c.add_argument(
        "--ckpt-hang-detect-s",
        type=_non_negative,
        default=D.ckpt_hang_detect_s,
        help="seconds until a hang ends the job (default 600: torch.distributed's default collective timeout)",
    )
    ll = p.add_argument_group("lamplighter and the poll runner")
    ll.add_argument(
        "--detect-s",
        type=_non_negative,
        default=None,
        help=f"seconds until lamplighter sees an exit {MEASURED}",
    )
    ll.add_argument(
        "--hang-detect-s",
        type=_non_negative,
        default=None,
        help=f"seconds until lamplighter calls a hang (default: health.hang_timeout_s, 30, + the measured lag) {VARIES}",
    )
    ll.add_argument(
        "--bad-node-share",
        type=_share,
        default=None,
        help=f"share of faults that leave their node bad until repaired (a lemon: an in-job restart fails there) {VARIES}",
    )
    ll.add_argument(
        "--queue-wait-s",
        type=_non_negative,
        default=None,
        help=f"seconds a fresh submission waits in the queue (the poll runner's every restart; lamplighter's off a bad "
        f"node) {MEASURED}",
    )
    ll.add_argument(
        "--group-restart-s",
        type=_non_negative,
        default=None,
        help=f"seconds from a detected fault to the group's first commit, heal excluded {VARIES}",
    )
    ll.add_argument(
        "--heal-gbs-per-gpu",
        type=pos,
        default=D.heal_bps_per_gpu / gm.GB,
        help="GB/s each GPU of a healing group receives its shard at (default 25, assumed: half a 400 Gb/s NIC)",
    )
    ll.add_argument(
        "--stall-s", type=_non_negative, default=None, help=f"seconds every survivor stalls at an exit {VARIES}"
    )
    ll.add_argument(
        "--hang-stall-s", type=_non_negative, default=None, help=f"seconds every survivor stalls at a hang {VARIES}"
    )
    ll.add_argument(
        "--stall-per-group-s",
        type=_non_negative,
        default=None,
        help="seconds both stalls grow per replica group (default: inside the scenario's stall)",
    )
    ll.add_argument(
        "--rejoin-stall-s",
        type=_non_negative,
        default=None,
        help=f"seconds every survivor stalls again when the group rejoins (torchft's second quorum change) {VARIES}",
    )
    ll.add_argument(
        "--step-overhead",
        type=_share,
        default=None,
        help=f"torchft's per-step throughput cost against plain DDP, a fraction {VARIES}",
    )
    ll.add_argument(
        "--fallback-interval-s",
        type=pos,
        default=D.fallback_interval_s,
        help=f"seconds between fallback checkpoints (default {D.fallback_interval_s:g}: trainer.checkpoint.interval_s)",
    )
    ll.add_argument(
        "--poll-s", type=pos, default=D.poll_s, help="poll runner's squeue interval, s (default 10: torchft's example)"
    )
    ll.add_argument(
        "--time-limit-h",
        type=pos,
        default=D.time_limit_s / gm.HOUR,
        help="a poll-runner group job's time limit, h: a hang holds its GPUs until then (default 24, assumed)",
    )
    out = p.add_argument_group("inputs and output")
    out.add_argument(
        "--results",
        metavar="DIR",
        type=Path,
        default=None,
        help="read the measured inputs from the benchmark's result files in DIR, e.g. bench/results after `make "
        "bench` (default: the snapshot of bench/results shipped with lamplighter, plan/measured_inputs.json)",
    )
    out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    out.add_argument("--sweep", action="store_true", help="goodput at 64 .. 16384 GPUs for the model")
    out.add_argument(
        "--plot",
        metavar="FILE",
        default=None,
        help="draw goodput and the GPU-hours lost per day (log axis) against GPUs, 8B and 70B (matplotlib)",
    )
    p.set_defaults(func=run_plan)


# Options whose value, when given, holds in every scenario (plan/ranges.py), and the field each sets.
PINNABLE = {
    "hang_share": "hang_share",
    "nonlocal_share": "nonlocal_share",
    "ckpt_write_gbs": "ckpt_write_bps",
    "ckpt_read_gbs": "ckpt_read_bps",
    "job_restart_s": "job_restart_s",
    "group_restart_s": "group_restart_s",
    "stall_s": "stall_s",
    "hang_stall_s": "hang_stall_s",
    "stall_per_group_s": "stall_per_group_s",
    "rejoin_stall_s": "rejoin_stall_s",
    "step_overhead": "step_overhead",
    "detect_s": "detect_s",
    "hang_detect_s": "hang_detect_s",
    "bad_node_share": "bad_node_share",
    "queue_wait_s": "queue_wait_s",
}


def pinned(args: argparse.Namespace) -> dict[str, float]:
    out = {}
    for opt, key in PINNABLE.items():
        value = getattr(args, opt)
        if value is not None:
            out[key] = value * gm.GB if opt.endswith("_gbs") else value
    return out


def inputs(args: argparse.Namespace, model: str | None = None) -> tuple[gm.Cluster, gm.Workload, gm.Costs]:
    """The model's certain inputs from the arguments (the uncertain ones: plan/ranges.py); `model` overrides
    --model (the plot draws both)."""
    preset = gm.MODELS[model or args.model]
    if args.failures_per_node_day is not None:
        per_gpu_s = args.failures_per_node_day / args.gpus_per_node / gm.DAY
    elif args.failures_per_gpu_day is not None:
        per_gpu_s = args.failures_per_gpu_day / gm.DAY
    else:
        per_gpu_s = gm.LLAMA3_FAILURES_PER_GPU_S
    cluster = gm.Cluster(
        gpus=args.gpus,
        gpus_per_node=args.gpus_per_node,
        group_gpus=args.group_gpus or preset.group_gpus,
        failures_per_gpu_s=per_gpu_s,
    )
    params = args.params_b * 1e9 if args.params_b and model is None else preset.params
    work = gm.Workload(params=params, bytes_per_param=args.bytes_per_param)
    costs = gm.Costs(
        ckpt_interval_s=args.ckpt_interval_s,
        ckpt_detect_s=args.ckpt_detect_s,
        ckpt_hang_detect_s=args.ckpt_hang_detect_s,
        heal_bps_per_gpu=args.heal_gbs_per_gpu * gm.GB,
        poll_s=args.poll_s,
        time_limit_s=args.time_limit_h * gm.HOUR,
        fallback_interval_s=args.fallback_interval_s,
    )
    return cluster, work, costs


def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no infinity


def as_json(cluster: gm.Cluster, work: gm.Workload, costs: gm.Costs, results: list[gm.Result]) -> dict[str, Any]:
    return {
        "inputs": {
            "cluster": asdict(cluster),
            "workload": {**asdict(work), "state_bytes": work.state_bytes},
            "costs": {k: _number(v) if isinstance(v, float) else v for k, v in asdict(costs).items()},
        },
        "strategies": {
            r.strategy: {
                "goodput": r.goodput,
                "lost_gpu_h_per_day": r.lost_gpu_h_per_day,
                "job_mtbf_h": _number(r.job_mtbf_h),
                "cost_per_fault_gpu_s": r.cost_per_fault_gpu_s,
                **{k: _number(v) for k, v in r.detail.items()},
            }
            for r in results
        },
    }


def range_json(
    cluster: gm.Cluster, work: gm.Workload, costs: gm.Costs, pins: rg.Pinned, m: rg.Measurements
) -> dict[str, Any]:
    by = rg.ranges(cluster, work, costs, pins, m)
    return {
        "scenarios": {s: as_json(c, work, k, results) for s, (c, k, results) in by.items()},
        "assumptions": [
            {"label": label, **dict(zip(rg.SCENARIOS, cells, strict=True))}
            for label, cells in rg.assumption_rows(cluster, pins, m)
        ],
        "measured": [asdict(x) for x in rg.sources(pins, m)],
        "same_under_central": [list(pair) for pair in alike(by)],
        "time_limit": {f"{h:g}h": row for h, row in time_limits(cluster, work, costs, pins, m).items()},
        "pinned": dict(pins),
        "published": [asdict(p) for p in rg.PUBLISHED],
    }


SAME = 0.0005  # central goodputs this close are called the same: below the model's resolution of its inputs
TIME_LIMITS_H = (4.0, 24.0, 72.0)


def alike(by: dict[str, tuple[gm.Cluster, gm.Costs, list[gm.Result]]]) -> list[tuple[str, str, float, float]]:
    """Pairs of strategies whose central goodputs differ by less than SAME: (a, b, goodput a, goodput b)."""
    central = by["central"][2]
    return [
        (x.strategy, y.strategy, x.goodput, y.goodput)
        for i, x in enumerate(central)
        for y in central[i + 1 :]
        if abs(x.goodput - y.goodput) < SAME
    ]


def time_limits(
    cluster: gm.Cluster, work: gm.Workload, costs: gm.Costs, pins: rg.Pinned, m: rg.Measurements
) -> dict[float, dict[str, float]]:
    """Central goodput per strategy at each time limit of TIME_LIMITS_H: what a fault nothing repairs costs
    depends on how long the job still had to run."""
    out = {}
    for hours in TIME_LIMITS_H:
        c, k = rg.inputs(cluster, replace(costs, time_limit_s=hours * gm.HOUR), "central", pins, m)
        out[hours] = {r.strategy: r.goodput for r in gm.compare(c, work, k)}
    return out


def table(cluster: gm.Cluster, work: gm.Workload, costs: gm.Costs, pins: rg.Pinned, m: rg.Measurements) -> str:
    by = rg.ranges(cluster, work, costs, pins, m)
    first = by["central"][2][0]
    lines = [
        f"{cluster.gpus} GPUs in {cluster.groups} groups of {cluster.group_gpus}; state "
        f"{work.state_bytes / gm.GB:,.0f} GB; job MTBF {first.job_mtbf_h:.2f} h "
        f"({gm.job_failure_rate(cluster) * gm.DAY:.1f} faults/day)",
        "goodput against plain synchronous training with nothing failing; low / central / high: every uncertain "
        "input pessimistic / central / optimistic",
        "",
        f"{'strategy':<15} {'low':>7} {'central':>8} {'high':>7}   {'GPU-h lost per day (low / central / high)'}",
    ]
    for i, name in enumerate(r.strategy for r in by["central"][2]):
        rs = [by[s][2][i] for s in rg.SCENARIOS]
        lost = " / ".join(f"{r.lost_gpu_h_per_day:,.0f}" for r in rs)
        lines.append(f"{name:<15} {rs[0].goodput:>7.3f} {rs[1].goodput:>8.3f} {rs[2].goodput:>7.3f}   {lost}")
    lines.append("")
    for a, b, ga, gb in alike(by):
        lines.append(f"{a} and {b} do not differ under the central inputs ({ga:.4f} and {gb:.4f})")
    limits = time_limits(cluster, work, costs, pins, m)
    names = list(next(iter(limits.values())))
    lines += [
        "central goodput against the job's time limit (a fault nothing repairs holds its GPUs until then):",
        f"  {'limit':>6} " + " ".join(f"{n:>15}" for n in names),
    ]
    lines += [f"  {h:>5g}h " + " ".join(f"{row[n]:>15.4f}" for n in names) for h, row in limits.items()]
    lines += ["", "inputs (low | central | high):"]
    for label, cells in rg.assumption_rows(cluster, pins, m):
        lines.append(f"  {label}: " + " | ".join(cells))
    lines += ["", "measured inputs, where each came from (low | central | high):"]
    for x in rg.sources(pins, m):
        lines.append(f"  {x.key} ({x.meaning}): {x.low:.4g} | {x.central:.4g} | {x.high:.4g} s; {x.source}")
    lines += ["", "published, for comparison:"]
    lines += [f"  {p.source}: {p.figure} ({p.scale})" for p in rg.PUBLISHED]
    return "\n".join(lines)


def sweep_table(cluster: gm.Cluster, work: gm.Workload, costs: gm.Costs, pins: rg.Pinned, m: rg.Measurements) -> str:
    swept = sweep_ranges(cluster, work, costs, pins, m)
    names = [r.strategy for r in next(iter(swept.values()))["central"]]
    lines = [f"{'GPUs':>6} {'MTBF h':>8} " + " ".join(f"{n + ' central [low-high]':>30}" for n in names)]
    for n, by in swept.items():
        cells = [
            f"{by['central'][i].goodput:.4f} [{by['low'][i].goodput:.4f}-{by['high'][i].goodput:.4f}]"
            for i in range(len(names))
        ]
        lines.append(f"{n:>6} {by['central'][0].job_mtbf_h:>8.1f} " + " ".join(f"{c:>30}" for c in cells))
    return "\n".join(lines)


def sweep_ranges(
    cluster: gm.Cluster, work: gm.Workload, costs: gm.Costs, pins: rg.Pinned, m: rg.Measurements
) -> dict[int, dict[str, list[gm.Result]]]:
    """Per size of gm.SWEEP_SIZES that leaves two groups: each scenario's results."""
    out: dict[int, dict[str, list[gm.Result]]] = {}
    for n in gm.SWEEP_SIZES:
        sized = replace(cluster, gpus=n)
        if not gm.check(sized, work, costs):
            out[n] = {s: results for s, (_c, _k, results) in rg.ranges(sized, work, costs, pins, m).items()}
    return out


def plot(args: argparse.Namespace, path: str, m: rg.Measurements) -> None:
    """Goodput against GPUs, one panel per model, central lines in low-high bands; raises ImportError without
    matplotlib."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("--plot needs matplotlib: pip install 'lamplighter[plots]'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pins = pinned(args)
    # Top: goodput; bottom: the GPU-hours a day each strategy loses, on a log axis (a 99.9% goodput and a 99%
    # one look alike on the first, and differ tenfold in what they cost).
    fig, grid = plt.subplots(2, len(gm.MODELS), figsize=(11, 7.5), sharex="col")
    for col, name in enumerate(sorted(gm.MODELS)):
        ax, lost_ax = grid[0][col], grid[1][col]
        cluster, work, costs = inputs(args, model=name)
        swept = sweep_ranges(cluster, work, costs, pins, m)
        sizes = list(swept)
        for i, strategy in enumerate(r.strategy for r in swept[sizes[0]]["central"]):
            band = {k: [swept[n][k][i].goodput for n in sizes] for k in ("low", "central", "high")}
            line = ax.plot(sizes, band["central"], marker="o", label=strategy)[0]
            ax.fill_between(sizes, band["low"], band["high"], color=line.get_color(), alpha=0.15)
            lost = {k: [max(1e-3, (1 - g) * n * 24) for g, n in zip(v, sizes, strict=True)] for k, v in band.items()}
            lost_ax.plot(sizes, lost["central"], marker="o", color=line.get_color(), label=strategy)
            lost_ax.fill_between(sizes, lost["high"], lost["low"], color=line.get_color(), alpha=0.15)
        for a in (ax, lost_ax):
            a.set_xscale("log", base=2)
            a.grid(alpha=0.3, which="both")
        lost_ax.set_yscale("log")
        lost_ax.set_xticks(sizes, [str(n) for n in sizes], rotation=45)
        lost_ax.set_xlabel("GPUs")
        ax.set_title(f"{name.upper()}, groups of {cluster.group_gpus} GPUs")
    grid[0][0].set_ylabel("goodput (fraction of plain training, nothing failing)")
    grid[1][0].set_ylabel("GPU-hours lost per day (log)")
    grid[0][0].legend()
    fig.suptitle("lamplighter plan: central, and the low-high range of its inputs (plan/ranges.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def measurements(args: argparse.Namespace) -> rg.Measurements:
    """The measured inputs: --results DIR's files over the shipped snapshot (a file DIR lacks keeps the snapshot's)."""
    if args.results is None:
        return ms.snapshot()
    if not args.results.is_dir():
        raise ms.MalformedResult(f"--results {args.results}: not a directory")
    return {**ms.snapshot(), **ms.load(args.results)}


def run_plan(args: argparse.Namespace) -> int:
    try:
        m = measurements(args)
    except ms.MalformedResult as e:
        print(f"lamplighter plan: error: {e}", file=sys.stderr)
        return 2
    cluster, work, costs = inputs(args)
    pins = pinned(args)
    bad = sorted({p for s in rg.SCENARIOS for p in gm.check(*_scenario(cluster, work, costs, s, pins, m))})
    if bad:
        for problem in bad:
            print(f"lamplighter plan: error: {problem}", file=sys.stderr)
        return 2
    if args.plot:
        try:
            plot(args, args.plot, m)
        except ImportError as e:
            print(f"lamplighter plan: error: {e}", file=sys.stderr)
            return 1
        print(f"wrote {args.plot}")
        return 0
    if args.sweep:
        if not sweep_ranges(cluster, work, costs, pins, m):
            print(
                f"lamplighter plan: error: no size of {gm.SWEEP_SIZES} leaves two groups of {cluster.group_gpus}",
                file=sys.stderr,
            )
            return 2
        if args.json:
            doc = {
                str(n): {s: as_json(replace(cluster, gpus=n), work, costs, rs)["strategies"] for s, rs in by.items()}
                for n, by in sweep_ranges(cluster, work, costs, pins, m).items()
            }
            print(json.dumps(doc, indent=2))
        else:
            print(f"model {args.model}, groups of {cluster.group_gpus} GPUs: goodput, central [low-high]")
            print(sweep_table(cluster, work, costs, pins, m))
        return 0
    print(
        json.dumps(range_json(cluster, work, costs, pins, m), indent=2)
        if args.json
        else table(cluster, work, costs, pins, m)
    )
    return 0


def _scenario(
    cluster: gm.Cluster, work: gm.Workload, costs: gm.Costs, s: str, pins: rg.Pinned, m: rg.Measurements
) -> tuple[gm.Cluster, gm.Workload, gm.Costs]:
    c, k = rg.inputs(cluster, costs, s, pins, m)
    return c, work, k
