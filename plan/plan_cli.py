"""`lamplighter plan`: what faults cost a job under lamplighter, checkpoint-restart and a 10 s poll runner.

A goodput model (lamplighter/plan/goodput_model.py holds every formula and assumption): from the
cluster size, a failure rate (default: Llama 3's 419 unexpected interruptions in 54 days on 16,384
GPUs), the model's state size, checkpoint bandwidth and restart costs, it prints per strategy the
goodput (fraction of fault-free throughput kept), the GPU-hours lost per day and the job's MTBF.
Defaults marked "assumed" are not measured: pass your cluster's numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, replace
from typing import Any

from lamplighter.plan import goodput_model as gm

HELP = "goodput and lost GPU-hours per day of lamplighter, checkpoint-restart and a poll runner (a model)"
EPILOG = """\
examples:
  lamplighter plan --gpus 16384 --model 70b
  lamplighter plan --gpus 1024 --model 8b --ckpt-write-gbs 200 --json
  lamplighter plan --model 70b --sweep                 goodput at 64 .. 16384 GPUs
  lamplighter plan --plot goodput.png                  8B and 70B, 64 .. 16384 GPUs (needs matplotlib)

exit status: 0 printed, 1 the plot could not be drawn, 2 bad input
"""

D = gm.Costs()  # the defaults, for the help texts


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
        "--hang-share",
        type=_share,
        default=gm.Cluster().hang_share,
        help="share of faults that hang rather than exit, 0..1 (default 0.1, assumed: no published split)",
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
        default=D.ckpt_write_bps / gm.GB,
        help="the job's aggregate checkpoint write bandwidth, GB/s (default 50, assumed)",
    )
    c.add_argument(
        "--ckpt-read-gbs",
        type=pos,
        default=D.ckpt_read_bps / gm.GB,
        help="the job's aggregate checkpoint read bandwidth, GB/s (default 50, assumed)",
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
        default=D.job_restart_s,
        help="seconds from a detected fault to the whole job running again, reads excluded (default 300, assumed)",
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
        default=D.detect_s,
        help="seconds until lamplighter sees an exit (default 1: the node daemon's poll; 0.4 measured in bench/)",
    )
    ll.add_argument(
        "--hang-detect-s",
        type=_non_negative,
        default=D.hang_detect_s,
        help="seconds until lamplighter calls a hang (default 30: configs' health.hang_timeout_s)",
    )
    ll.add_argument(
        "--group-restart-s",
        type=_non_negative,
        default=D.group_restart_s,
        help="seconds from a detected fault to the group's first commit, heal excluded (default 60, assumed)",
    )
    ll.add_argument(
        "--heal-gbs-per-gpu",
        type=pos,
        default=D.heal_bps_per_gpu / gm.GB,
        help="GB/s each GPU of a healing group receives its shard at (default 25, assumed: half a 400 Gb/s NIC)",
    )
    ll.add_argument(
        "--stall-s",
        type=_non_negative,
        default=D.stall_s,
        help="seconds every survivor stalls at an exit (default 0.5: bench/results/survivor_stall.json)",
    )
    ll.add_argument(
        "--hang-stall-s",
        type=_non_negative,
        default=D.hang_stall_s,
        help="seconds every survivor stalls at a hang (default 3: configs' torchft.pg_timeout_s)",
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
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print JSON instead of a table")
    out.add_argument("--sweep", action="store_true", help="goodput at 64 .. 16384 GPUs for the model")
    out.add_argument("--plot", metavar="FILE", default=None, help="draw goodput against GPUs, 8B and 70B (matplotlib)")
    p.set_defaults(func=run_plan)


def inputs(args: argparse.Namespace, model: str | None = None) -> tuple[gm.Cluster, gm.Workload, gm.Costs]:
    """The model's inputs from the arguments; `model` overrides --model (the plot draws both)."""
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
        hang_share=args.hang_share,
    )
    params = args.params_b * 1e9 if args.params_b and model is None else preset.params
    work = gm.Workload(params=params, bytes_per_param=args.bytes_per_param)
    costs = gm.Costs(
        ckpt_write_bps=args.ckpt_write_gbs * gm.GB,
        ckpt_read_bps=args.ckpt_read_gbs * gm.GB,
        ckpt_interval_s=args.ckpt_interval_s,
        job_restart_s=args.job_restart_s,
        ckpt_detect_s=args.ckpt_detect_s,
        ckpt_hang_detect_s=args.ckpt_hang_detect_s,
        detect_s=args.detect_s,
        hang_detect_s=args.hang_detect_s,
        group_restart_s=args.group_restart_s,
        heal_bps_per_gpu=args.heal_gbs_per_gpu * gm.GB,
        stall_s=args.stall_s,
        hang_stall_s=args.hang_stall_s,
        poll_s=args.poll_s,
        time_limit_s=args.time_limit_h * gm.HOUR,
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


def table(cluster: gm.Cluster, work: gm.Workload, costs: gm.Costs, results: list[gm.Result]) -> str:
    groups = cluster.gpus // cluster.group_gpus
    mtbf = results[0].job_mtbf_h
    lines = [
        f"{cluster.gpus} GPUs in {groups} groups of {cluster.group_gpus}; state {work.state_bytes / gm.GB:,.0f} GB; "
        f"job MTBF {mtbf:.2f} h ({gm.job_failure_rate(cluster) * gm.DAY:.1f} faults/day, "
        f"{cluster.hang_share:.0%} hangs)",
        "",
        f"{'strategy':<13} {'goodput':>8} {'lost GPU-h/day':>15} {'per fault GPU-h':>16}  notes",
    ]
    for r in results:
        d = r.detail
        if r.strategy == "ckpt-restart":
            note = (
                f"checkpoint {d['checkpoint_s']:.1f} s every {d['interval_s']:.0f} s, job down {d['job_down_s']:.0f} s"
            )
        elif r.strategy == "lamplighter":
            note = f"group out {d['group_out_s']:.1f} s (heal {d['heal_s']:.1f} s), stall {d['stall_s']:.2f} s"
        else:
            note = f"group out {d['exit_out_s']:.1f} s after an exit, {d['hang_out_s'] / gm.HOUR:.1f} h after a hang"
        lines.append(
            f"{r.strategy:<13} {r.goodput:>8.5f} {r.lost_gpu_h_per_day:>15,.1f} "
            f"{r.cost_per_fault_gpu_s / gm.HOUR:>16,.1f}  {note}"
        )
    return "\n".join(lines)


def sweep_table(swept: dict[int, list[gm.Result]]) -> str:
    names = [r.strategy for r in next(iter(swept.values()))]
    lines = [f"{'GPUs':>6} {'MTBF h':>8} " + " ".join(f"{n:>13}" for n in names)]
    for n, results in swept.items():
        lines.append(f"{n:>6} {results[0].job_mtbf_h:>8.1f} " + " ".join(f"{r.goodput:>13.5f}" for r in results))
    return "\n".join(lines)


def plot(args: argparse.Namespace, path: str) -> None:
    """Goodput against GPUs, one panel per model; raises ImportError without matplotlib."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("--plot needs matplotlib: pip install 'lamplighter[plots]'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(gm.MODELS), figsize=(11, 4), sharey=True)
    for ax, name in zip(axes, sorted(gm.MODELS), strict=True):
        cluster, work, costs = inputs(args, model=name)
        swept = gm.sweep(cluster, work, costs, gm.SWEEP_SIZES)
        sizes = list(swept)
        for i, strategy in enumerate(r.strategy for r in swept[sizes[0]]):
            ax.plot(sizes, [swept[n][i].goodput for n in sizes], marker="o", label=strategy)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes], rotation=45)
        ax.set_title(f"{name.upper()}, groups of {cluster.group_gpus} GPUs")
        ax.set_xlabel("GPUs")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("goodput (fraction of fault-free)")
    axes[0].legend()
    fig.suptitle("lamplighter plan: goodput model (defaults marked 'assumed' in --help)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_plan(args: argparse.Namespace) -> int:
    cluster, work, costs = inputs(args)
    bad = gm.check(cluster, work, costs)
    if bad:
        for problem in bad:
            print(f"lamplighter plan: error: {problem}", file=sys.stderr)
        return 2
    if args.plot:
        try:
            plot(args, args.plot)
        except ImportError as e:
            print(f"lamplighter plan: error: {e}", file=sys.stderr)
            return 1
        print(f"wrote {args.plot}")
        return 0
    if args.sweep:
        swept = gm.sweep(cluster, work, costs, gm.SWEEP_SIZES)
        if not swept:
            print(
                f"lamplighter plan: error: no size of {gm.SWEEP_SIZES} leaves two groups of {cluster.group_gpus}",
                file=sys.stderr,
            )
            return 2
        if args.json:
            doc = {str(n): as_json(replace(cluster, gpus=n), work, costs, rs)["strategies"] for n, rs in swept.items()}
            print(json.dumps(doc, indent=2))
        else:
            print(f"model {args.model}, groups of {cluster.group_gpus} GPUs: goodput")
            print(sweep_table(swept))
        return 0
    results = gm.compare(cluster, work, costs)
    print(
        json.dumps(as_json(cluster, work, costs, results), indent=2)
        if args.json
        else table(cluster, work, costs, results)
    )
    return 0
