"""slurmctld RPCs lamplighter's node daemons cause, against the node count (#31 item 2, a first slice).

The Slurm lab (lab/slurm_lab.py: a real slurmctld, slurmd per PID namespace on this
machine's loopback, `lamplighter supervise` on every node as systemd would run it)
with 4 and 16 compute nodes, and on each compute node one job shaped like a
lamplighter group's (named ll-scale-g<i>, its step's task carrying LAMPLIGHTER_JOB and
LAMPLIGHTER_REPLICA_ID; the task is `sleep`: no trainer, no Lighthouse), so that each
node daemon has a group to watch. After a settling time, `sdiag -r`, a window, `sdiag`:
slurmctld's own count of the RPCs it served, by type, per second (sdiag's own aside;
the lab's harness sends none during the window), and each daemon's CPU and RSS; the
head's cycle time (its status' cycle_s, sampled each second of the window); then a GPU
fault on one node and a crash of another, and the time from each to lamplighter's
action (a drain, a mark-down) in the daemons' action logs.

Not yet what #31 asks for: slurmd here shares the host's network (not a namespace per
node), the groups run no trainer (no heartbeats, so no hang or exit is ever acted on),
and the jobs run as root, so the jobs' own `srun` calls are counted with lamplighter's
when Slurm restarts them (a CPU-starved size). Writes bench/results/slurm_rpc_scale.json.

    python -m bench.slurm_rpc_scale [--nodes 4,16] [--window-s 30] [--dir build/slurm-rpc-scale]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import psutil

from bench.results_io import RESULTS, environment, spread
from lamplighter.configs.slurm_names import group_job_name
from lamplighter.daemon.status_socket import StatusError, read_status
from lamplighter.gpusim.inject import inject as gpu_inject
from lamplighter.gpusim.state import StateDir
from lamplighter.lab.sdiag import parse_sdiag
from lamplighter.lab.slurm_lab import LabSettings, running_lab
from lamplighter.lab.testcluster import wait_until
from lamplighter.slurm.chaos_slurm import read_records
from lamplighter.trainer.contract import ENV_JOB, ENV_REPLICA_ID

JOB = "scale"
# RPCs slurmd and the step daemons send on their own (registration, a step's or job's end): Slurm's, not lamplighter's.
SLURM_OWN = frozenset(
    {
        "MESSAGE_NODE_REGISTRATION_STATUS",
        "MESSAGE_EPILOG_COMPLETE",
        "REQUEST_COMPLETE_BATCH_SCRIPT",
        "REQUEST_STEP_COMPLETE",
        "REQUEST_COMPLETE_PROLOG",
    }
)


def lamplighter_rate(by_type_per_s: dict[str, float]) -> float:
    """RPCs a second that the cluster's clients sent, Slurm's own daemons' aside."""
    return sum(v for k, v in by_type_per_s.items() if k not in SLURM_OWN)


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x (two or more distinct xs): (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("a line needs two distinct node counts")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - b * mx, b


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


FENCING = "REQUEST_JOB_INFO_SINGLE"  # a compute daemon's `scontrol show job <id>`: one per job every 5th cycle
STARVED = 0.8  # a size whose daemons fence at less than this share of the smallest size's rate per node


def fit(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """lamplighter's RPCs/s as a line in the node count, projected; over the sizes whose daemons kept their
    cycle. On one 2-core machine, many daemons slow each other's 1-s cycles, and their calls per node
    fall with them, which a real node (its own CPU) would not see: such a size is left out of the line,
    and named. None with fewer than two sizes left."""
    per_node = {r["nodes"]: r["by_type_per_s"].get(FENCING, 0.0) / r["nodes"] for r in rows}
    base = per_node[min(per_node)]
    kept = [r for r in rows if per_node[r["nodes"]] >= STARVED * base]
    if len({r["nodes"] for r in kept}) < 2:
        return None
    a, b = fit_line([float(r["nodes"]) for r in kept], [r["lamplighter_rpc_per_s"] for r in kept])
    return {
        "fixed": a,
        "per_node": b,
        "over_nodes": [r["nodes"] for r in kept],
        "left_out_cpu_starved": {
            str(n): f"fencing calls {v:.3f}/s per node against {base:.3f}/s at {min(per_node)} nodes"
            for n, v in per_node.items()
            if v < STARVED * base
        },
        "projected": {str(n): a + b * n for n in (64, 1_000, 10_000)},
        "goal": 1.0,  # #31: all of lamplighter at most 1 slurmctld RPC a second, whatever the node count
    }


def head_cycles(sock: Path, window_s: float) -> list[float]:
    """The head daemon's last cycle duration (its status' cycle_s), read once a second for the window."""
    out: list[float] = []
    end = time.monotonic() + window_s
    while time.monotonic() < end:
        try:
            cycle = read_status(sock, timeout=5).get("cycle_s")
        except (StatusError, OSError):
            cycle = None
        if isinstance(cycle, float | int):
            out.append(float(cycle))
        time.sleep(1.0)  # a sampling period, not a wait for anything
    return out


def first_action(lab: Any, since: float, node: str, kinds: tuple[str, ...], timeout_s: float) -> float | None:
    """Seconds from `since` to the first action of those kinds on `node` in any daemon's action log."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for path in lab.action_logs():
            for rec in read_records(path):
                if rec.get("ts", 0) >= since and rec.get("action") in kinds and rec.get("target") == node:
                    return float(rec["ts"]) - since
        time.sleep(0.2)  # polling the logs the daemons append to
    return None


def faults(lab: Any) -> dict[str, float | None]:
    """A GPU fault on the first compute node (its daemon drains it) and a crash of the last (the head drains
    it or marks it down): the time from each to lamplighter's action, from the action logs."""
    gpu_node, crash_node = lab.compute[0], lab.compute[-1]
    t = time.time()
    gpu_inject(StateDir(lab.gpusim_root / gpu_node), 0, "ecc-uncorrectable")
    gpu = first_action(lab, t, gpu_node, ("drain",), 60)
    t = time.time()
    lab.cluster.crash_node(crash_node)
    crash = first_action(lab, t, crash_node, ("drain", "mark_down"), 60)
    return {"gpu_fault": gpu, "node_crash": crash}


def measure(folder: Path, nodes: int, settle_s: float, window_s: float) -> dict[str, Any]:
    shutil.rmtree(folder, ignore_errors=True)
    with running_lab(folder, LabSettings(compute_nodes=nodes, gpus_per_node=1), alive_timeout=120) as lab:
        try:
            cli = lab.cluster.cli(timeout=30)
            (folder / "jobs").mkdir(exist_ok=True)
            for i, node in enumerate(lab.compute):
                cli.run(
                    "sbatch",
                    f"--job-name={group_job_name(JOB, i)}",
                    f"--nodelist={node}",
                    "--nodes=1",
                    "--ntasks=1",
                    f"--output={folder / 'jobs' / f'g{i}.out'}",
                    f"--export=ALL,{ENV_JOB}={JOB},{ENV_REPLICA_ID}={i}",
                    "--wrap=srun sleep 100000",
                )

            def all_running() -> bool:
                states = cli.run("squeue", "--noheader", "-o", "%T").split()
                return len(states) == nodes and all(s == "RUNNING" for s in states)

            wait_until(all_running, 120, f"{nodes} group jobs to run")
            time.sleep(settle_s)
            daemons = {n: lab.services.pid(f"supervise-{n}") for n in lab.cluster.node_names}
            pids = {n: p for n, p in daemons.items() if p is not None}
            cpu0 = {n: cpu_s(p) for n, p in pids.items()}
            cli.run("sdiag", "-r")
            cycles = head_cycles(lab.node_dir(lab.head) / "status.sock", window_s)  # the window, sampled each second
            sd = parse_sdiag(cli.run("sdiag"))
            cpu1 = {n: cpu_s(p) for n, p in pids.items()}
            rss = {n: psutil.Process(p).memory_info().rss / 1e6 for n, p in pids.items()}
            states = cli.run("squeue", "--noheader", "-o", "%T").split()
            rates = sd.per_second()
            compute_cpu = [(cpu1[n] - cpu0[n]) / window_s for n in lab.compute if n in pids]
            return {
                "nodes": nodes,
                "window_s": sd.seconds,
                "slurmctld_rpc_per_s": sum(rates.values()),
                "slurmctld_rpc_per_node_s": sum(rates.values()) / nodes,
                "lamplighter_rpc_per_s": lamplighter_rate(rates),
                "by_type_per_s": dict(sorted(rates.items(), key=lambda kv: -kv[1])),
                "daemon_restarts": {
                    n: len(s.starts) - 1 for n, s in lab.services.services.items() if len(s.starts) > 1
                },
                "head_daemon_cpu_cores": (cpu1[lab.head] - cpu0[lab.head]) / window_s if lab.head in pids else None,
                "compute_daemon_cpu_cores_median": sorted(compute_cpu)[len(compute_cpu) // 2] if compute_cpu else None,
                "compute_daemon_rss_mb_max": max(rss[n] for n in lab.compute if n in rss),
                "jobs_running_at_end": states.count("RUNNING"),
                "actions_logged": sum(len(p.read_text().splitlines()) for p in lab.action_logs()),
                "head_cycle_s": spread(cycles) if cycles else None,
                "detect_to_action_s": faults(lab),
            }
        finally:
            try:
                for job_id in lab.cluster.cli().run("squeue", "--noheader", "-o", "%i").split():
                    lab.cluster.cli().run("scancel", job_id)
            except Exception as e:  # the cluster is taken down after either way
                print(f"slurm_rpc_scale: cancelling the jobs: {e}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="4,16", help="compute node counts")
    ap.add_argument("--settle-s", type=float, default=15.0)
    ap.add_argument("--window-s", type=float, default=30.0)
    ap.add_argument("--dir", type=Path, default=Path("build/slurm-rpc-scale"))
    ap.add_argument("--out", type=Path, default=RESULTS / "slurm_rpc_scale.json")
    ap.add_argument("--refit", action="store_true", help="recompute the line from --out's rows, measuring nothing")
    args = ap.parse_args(argv)
    if args.refit:
        old = json.loads(args.out.read_text())
        rows = old.pop("nodes")
        write(args.out, old, rows)
        return 0
    rows = []
    for n in [int(x) for x in args.nodes.split(",")]:
        t = time.monotonic()
        row = measure(args.dir / f"nodes-{n}", n, args.settle_s, args.window_s)
        rows.append(row)
        top = ", ".join(f"{k} {v:.2f}" for k, v in list(row["by_type_per_s"].items())[:4])
        print(
            f"{n:3d} nodes: {row['slurmctld_rpc_per_s']:.2f} slurmctld RPC/s ({top}); compute daemon "
            f"{row['compute_daemon_cpu_cores_median']:.3f} cores, head {row['head_daemon_cpu_cores']:.3f} "
            f"({time.monotonic() - t:.0f} s)",
            flush=True,
        )
    result: dict[str, Any] = {"name": args.out.stem, "environment": environment(), "window_s": args.window_s}
    write(args.out, result, rows)
    return 0


def write(out: Path, result: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    line = fit(rows)
    if line is not None:
        a, b = line["fixed"], line["per_node"]
        print(f"lamplighter's RPCs/s ~ {a:.2f} + {b:.3f} x nodes: {a + b * 1000:.0f} at 1,000 nodes", flush=True)
    result["fit_lamplighter_rpc_per_s"] = line
    result["nodes"] = rows
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    raise SystemExit(main())
