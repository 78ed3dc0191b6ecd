"""`make demo-slurm`: the whole Slurm path on this machine, with one fault of each kind.

Brings up the test cluster (head n1 + 6 compute nodes) with simulated GPUs, the
node daemons and the head-node Lighthouse service, submits a 3-group job,
injects kill, hang, gpu, node-crash, lighthouse-kill and supervisor-kill one at
a time (each waits until its group commits again), waits for the end, writes
report.json and timeline.png, prints the per-fault numbers and tears it all down.

    python -m lamplighter.lab.demo [--dir build/demo-slurm] [--steps 1100] [--kinds kill,gpu]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from lamplighter.configs.schema import HealthConfig, RestartConfig
from lamplighter.lab.e2e_run import bring_back, drained_nodes, per_kind_lines, prepare_run
from lamplighter.lab.slurm_lab import LabSettings, running_lab
from lamplighter.lab.source_stamp import source_stamp
from lamplighter.lab.testcluster import slurm_installed, wait_until
from lamplighter.report.build import run_ok
from lamplighter.slurm.chaos.inject import KINDS

HANG_TIMEOUT_S = 8.0
DEFAULT_KINDS = ("kill", "hang", "gpu", "node-crash", "lighthouse-kill", "supervisor-kill")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lamplighter.lab.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--dir", type=Path, default=Path("build/demo-slurm"), help="lab folder (wiped first)")
    ap.add_argument("--steps", type=int, default=1100, help="target steps (long enough for every fault)")
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(DEFAULT_KINDS), help="fault kinds, in order")
    ap.add_argument("--no-daemons", action="store_true", help="no node daemons: Slurm's own detection only")
    args = ap.parse_args(argv)
    missing = slurm_installed()
    if missing:
        print(f"demo-slurm: {missing}", file=sys.stderr)
        return 2
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        print(f"demo-slurm: unknown kinds {bad} (known: {', '.join(KINDS)})", file=sys.stderr)
        return 2
    root = args.dir.resolve()
    source = source_stamp()  # at the start: the code that ran, whatever happens to the tree meanwhile
    shutil.rmtree(root, ignore_errors=True)
    print(f"starting the lab under {root} (cluster, gpusim, daemons) ...", flush=True)
    with running_lab(
        root / "lab",
        LabSettings(
            compute_nodes=6,
            health=HealthConfig(hang_timeout_s=HANG_TIMEOUT_S, poll_interval_s=0.5),
            restart=RestartConfig(budget_per_group=10, crash_loop_max=10),
        ),
        daemons=not args.no_daemons,
    ) as lab:
        run = prepare_run(lab, root, name="demo", steps=args.steps, groups=args.groups, port=lab.job_port)
        sub = run.submit()
        print(f"submitted: groups {sub.groups}; waiting for every group to commit ...", flush=True)
        run.wait_all_committing()
        wait_until(
            lambda: min(len(run.committed_steps(g)) for g in range(args.groups)) >= 30, 120, "30 fault-free steps"
        )
        gpu_node: str | None = None
        for i, kind in enumerate(kinds):
            # A different group each time: the daemon keeps a requeued job off every node it failed on.
            group, node = run.group_on_node(exclude={gpu_node} if gpu_node else None, prefer=i % args.groups)
            out = run.fault(kind, None if kind == "lighthouse-kill" else group)
            print(
                json.dumps({k: out.recovered[k] for k in ("kind", "group", "node_after", "t_first_commit")}), flush=True
            )
            if kind == "gpu":
                gpu_node = node
            if kind == "node-crash":
                bring_back(run, lab, node)
        drained = drained_nodes(run)
        states = run.wait_end(900)
        report = run.report(
            extra={
                "drained_nodes": drained,
                "slurm_end_states": {str(k): v for k, v in states.items()},
                "hang_timeout_s": HANG_TIMEOUT_S,
                "source": source,
            }
        )
        (root / "report.json").write_text(json.dumps(report, indent=2) + "\n")  # where make demo-results finds it
        print("\n".join(per_kind_lines(report)))
        ok = run_ok(report)
        print(
            f"{'OK' if ok else 'FAILED'}: steps {report['steps_committed']}/{report['target_steps']}, lost "
            f"{report['steps_lost']}, weights identical {report['weights_identical']}, drained {drained or 'none'}"
        )
        print(f"report: {Path(sub.run_dir) / 'report.json'}   timeline: {report.get('timeline')}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
