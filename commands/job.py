"""`lamplighter submit | status | cancel | chaos`: a job on a Slurm cluster, from the user's side.

JOB (status, cancel, chaos) is a job name (a job you submitted, found through
your index of submitted jobs wherever its run dir is; else $LAMPLIGHTER_RUNS/<name>
or runs/<name>: slurm/submit/job_index.py), a run directory holding submission.json,
or the job's config file; --run-dir overrides all three.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lamplighter.commands.nodes import add_cluster_status_arg, cluster_status_dir
from lamplighter.commands.validate import add_override_args, report_invalid
from lamplighter.slurm.actions import SlurmActions, SlurmApi
from lamplighter.slurm.run import SlurmCli, SlurmError
from lamplighter.slurm.submit.submission import Submission, SubmitError, cancel_job, find_run_dir, load, submit_job

if TYPE_CHECKING:
    from lamplighter.slurm.chaos.inject import ClusterPowers

EXIT_INVALID = 2
EXIT_FAILED = 1
# status --watch: one refresh costs slurmctld a squeue (none with a fresh head table) and a `scontrol show nodes`;
# every 10 s that is 0.2 RPCs a second from one terminal (it was 6 calls every 2 s for 4 groups: P2-9).
WATCH_S = 10.0
MIN_WATCH_S = 2.0


def api_for(slurm_conf: str | None) -> SlurmActions:
    return SlurmActions(SlurmCli(slurm_conf=slurm_conf or os.environ.get("SLURM_CONF")))


def add_parser(sub: Any) -> None:
    _add_submit(sub)
    _add_status(sub)
    _add_cancel(sub)
    add_chaos_parser(sub)


def _job_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "job",
        metavar="JOB",
        help="job name (as submitted by you, in $LAMPLIGHTER_RUNS, or runs/<name>), run directory, or config file",
    )
    p.add_argument("--run-dir", default=None, help="the job's run directory (holds submission.json)")


def _add_submit(sub: Any) -> None:
    p = sub.add_parser(
        "submit",
        help="validate, render and submit a job to Slurm (Lighthouse + one requeueable job per group)",
        description=__doc__ or "",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  lamplighter submit configs/slurm-lab.yaml\n"
        "  lamplighter submit configs/slurm-lab.yaml --set groups.count=3 --json",
    )
    p.add_argument("config", help="the job's YAML config")
    add_override_args(p)
    p.add_argument("--slurm-conf", default=None, help="SLURM_CONF for the Slurm commands (default: slurm.slurm_conf)")
    p.add_argument(
        "--wait",
        action="store_true",
        help="after queueing, wait until the Lighthouse answers (however long its job is queued), a line per "
        "change; a Lighthouse that cannot start fails it naming the error from its log, and everything is cancelled",
    )
    p.add_argument(
        "--lighthouse-timeout",
        type=float,
        default=60.0,
        help="with --wait: seconds the Lighthouse has to answer once its job runs (default 60)",
    )
    p.add_argument("--json", action="store_true", help="print the submission record as JSON")
    p.set_defaults(func=run_submit)


def run_submit(args: argparse.Namespace) -> int:
    from lamplighter.configs.loader import ConfigError, load_job
    from lamplighter.configs.schema import ignored_off_local

    try:
        job = load_job(args.config, args.overrides, os.environ)
    except ConfigError as e:
        return report_invalid(e)
    if args.slurm_conf:
        job = job.model_copy(update={"slurm": job.slurm.model_copy(update={"slurm_conf": args.slurm_conf})})
    for note in ignored_off_local(job):
        print(f"lamplighter submit: note: {note}", file=sys.stderr)
    try:
        s = submit_job(
            job,
            api_for(job.slurm.slurm_conf),
            config_path=args.config,
            wait=args.wait,
            lighthouse_timeout=args.lighthouse_timeout,
            say=lambda line: print(f"lamplighter submit: {line}", file=sys.stderr, flush=True),
        )
    except (SubmitError, SlurmError) as e:
        print(f"lamplighter submit: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    from lamplighter.slurm.submit.job_index import remember

    remember(s.job, s.run_dir)  # `status NAME` finds it from anywhere (not as root: slurm/submit/job_index.py)
    if args.json:
        print(json.dumps(s.to_json(), indent=2))
    else:
        lh = f"Slurm job {s.lighthouse_job_id}" if s.lighthouse_job_id is not None else "head-node service"
        where = s.lighthouse_address or "address published once its job runs"
        print(f"submitted {s.job}: Lighthouse {where} ({lh})")
        for g, jid in sorted(s.groups.items()):
            print(f"  group {g}: Slurm job {jid} (starts after the Lighthouse job has started)")
        print(f"scripts in {Path(s.run_dir) / 'sbatch'}; follow with: lamplighter status {s.job} --watch")
    return 0


def _load_sub(args: argparse.Namespace) -> Submission:
    return load(find_run_dir(args.job, args.run_dir))


def _add_status(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="groups, Slurm state, quorum, steps, restarts, faults, node daemons and drained nodes of a job",
        description="One picture of a job: per group its Slurm job, state, nodes, restarts, last committed step "
        "and last fault; the Lighthouse and its quorum; nodes out of service; the node daemons' health.\n\n"
        "--watch refreshes it until Ctrl-C, reading the job states the cheap way: from the head daemon's job "
        "table in the cluster status folder when it is fresh, else ONE squeue for all of the job's Slurm jobs "
        "(plain status asks scontrol once per job, for the whole record).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  lamplighter status llama3-8b\n  lamplighter status llama3-8b --watch          "
        "# every 10 s\n  lamplighter status runs/llama3-8b --json\n"
        "  lamplighter status llama3-8b --watch 30 --cluster-status-dir /shared/lamplighter/status\n\n"
        "exit status: 0 shown; 1 Slurm did not answer (states show as UNKNOWN, never GONE); 2 no such job",
    )
    _job_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_cluster_status_arg(p)
    p.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=WATCH_S,
        default=None,
        metavar="SECONDS",
        help=f"repeat every SECONDS (default {WATCH_S:.0f}; at least {MIN_WATCH_S:.0f}) until interrupted",
    )
    p.set_defaults(func=run_status)


def run_status(
    args: argparse.Namespace, api: SlurmApi | None = None, sleep: Callable[[float], None] = time.sleep
) -> int:
    """`api`, `sleep`: a test's fake Slurm, and what waits between refreshes (its clock)."""
    from lamplighter.commands.status import collect, format_table

    if args.watch is not None and not args.watch >= MIN_WATCH_S:
        print(f"lamplighter status: error: --watch {args.watch:g}: at least {MIN_WATCH_S:.0f} s", file=sys.stderr)
        return EXIT_INVALID
    try:
        s = _load_sub(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"lamplighter status: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    api = api or api_for(s.slurm_conf)
    folder = cluster_status_dir(args)
    watching = args.watch is not None
    try:
        while True:
            # Watching: the head's table or one squeue a refresh, not one scontrol per job (job_status.read_jobs).
            st = collect(s, api, time.time(), cluster_status_dir=folder, batched=watching)
            text = json.dumps(st, indent=2) if args.json else format_table(st)
            if watching and not args.json and sys.stdout.isatty():
                print("\x1b[2J\x1b[H", end="")
            print(text, flush=True)
            if not watching:
                # Slurm did not answer: what was shown is incomplete, and scripts must be able to tell.
                return EXIT_FAILED if st["slurm_error"] else 0
            sleep(args.watch)
    except KeyboardInterrupt:
        return 0


def _add_cancel(sub: Any) -> None:
    p = sub.add_parser("cancel", help="stop every Slurm job a submitted job started (groups, then the Lighthouse)")
    _job_args(p)
    p.add_argument(
        "--wait", type=float, default=30.0, help="seconds to wait for the jobs to end (default 30; 0: don't)"
    )
    p.set_defaults(func=run_cancel)


def run_cancel(args: argparse.Namespace) -> int:
    from lamplighter.slurm.submit.submission import wait_ended

    try:
        s = _load_sub(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"lamplighter cancel: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    api = api_for(s.slurm_conf)
    res = cancel_job(s, api)
    for c in res.cancelled:
        print(f"cancelled {c.what}: Slurm job {c.job_id} (was {c.state_before})")
    for f in res.failed:
        print(f"lamplighter cancel: error: could not cancel {f.what}: Slurm job {f.job_id}: {f.error}", file=sys.stderr)
    if res.failed:
        ids = " ".join(str(f.job_id) for f in res.failed)
        print(f"lamplighter cancel: {len(res.failed)} job(s) may still run ({ids}); run again once Slurm answers")
        return EXIT_FAILED
    if not res.cancelled:
        print(f"job {s.job}: nothing left to cancel")
    if args.wait > 0:
        try:
            states = wait_ended(s, api, args.wait)
        except TimeoutError as e:
            print(f"lamplighter cancel: error: {e}", file=sys.stderr)
            return EXIT_FAILED
        print("ended: " + ", ".join(f"{j} {st}" for j, st in states.items()))
    return 0


def add_chaos_parser(sub: Any) -> argparse.ArgumentParser:
    """`chaos`; the lab's entry (python -m lamplighter.lab chaos) adds its test cluster's own faults."""
    p = sub.add_parser(
        "chaos",
        help="inject faults into a running Slurm job (kill, hang, gpu, kill-healer, partition, lighthouse-kill, ...)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Inject faults and watch each recover. A schedule (@file) is exact: each fault fires at its time,\n"
            "whatever state its target is in, while earlier recoveries are still watched (a group whose job is\n"
            "not running is a recorded miss). Random draws (mtbf=) are gentle: each waits for a healthy target\n"
            "with a live peer left, and for the last fault's recovery. mode=exact|gentle in the spec overrides.\n"
            "Random draws go on until max=N or the job ends; when the job is over (every group job out of the\n"
            "queue) the schedule stops and the watches still open end, saying so.\n\n"
            "kinds: kill (SIGKILL a group's trainers), hang (SIGSTOP them), hang-collective (the reference\n"
            "trainer's main thread blocks inside its next step while torchft heartbeats go on), exception (it\n"
            "raises at its next step), gpu / gpu-hang / gpu-lost (uncorrectable ECC, amdsmi calls that block, a\n"
            "GPU off the bus: GPU 0 of the group's node, through its gpusim folder), kill-healer (kill the group,\n"
            "then the peer that sends its new attempt the state, during the transfer; the trainer must announce\n"
            "its sends in <run_dir>/heal/<group>.sending, as the reference trainer does), lighthouse-kill\n"
            "(SIGKILL what listens on the Lighthouse port), supervisor-kill (SIGKILL the node daemon started with\n"
            "LAMPLIGHTER_SUPERVISOR_NODE=<node>); ONLY on the lab's test cluster, through\n"
            "`python -m lamplighter.lab chaos`: node-crash (crash the group's node), partition (stop its slurmd\n"
            "for 20 s while its trainers live on), slurmctld-restart (kill the controller, start it 5 s later).\n"
            "Every injection, miss and recovery goes to <run_dir>/chaos.jsonl."
        ),
        epilog="examples:\n  lamplighter chaos lab --once kill --group 1\n"
        "  lamplighter chaos lab --chaos mtbf=30s,kinds=kill,hang,max=5\n"
        "  lamplighter chaos lab --chaos mtbf=5s,kinds=kill,hang-collective,max=20,mode=exact   # overlapping\n"
        "  lamplighter chaos lab --chaos @faults.yaml --gpusim-root build/gpus",
    )
    _job_args(p)
    p.add_argument("--once", default=None, metavar="KIND", help="inject one fault of KIND now")
    p.add_argument("--group", type=int, default=None, help="target group (default: drawn from the seed)")
    p.add_argument(
        "--chaos", default=None, metavar="SPEC", help="a schedule: mtbf=30s,kinds=kill,hang,max=5,seed=1 or @file.yaml"
    )
    p.add_argument("--gpusim-root", type=Path, default=None, help="folder holding one gpusim state folder per node")
    p.add_argument("--recovery-timeout", type=float, default=120.0, help="seconds to wait for each recovery")
    p.add_argument("--no-wait", action="store_true", help="inject and return without watching the recovery")
    p.set_defaults(func=run_chaos)
    return p


# Given the job's submission, what can crash nodes, cut them off and restart the controller (or None:
# node-crash, partition and slurmctld-restart are refused).
ClusterOpener = Callable[[Submission], "ClusterPowers | None"]


def run_chaos(args: argparse.Namespace, open_cluster: ClusterOpener | None = None) -> int:
    """`chaos`: one fault (--once) or a schedule (--chaos); only the lab's test cluster passes open_cluster."""
    from lamplighter.chaos.plan import ChaosSpecError, parse_chaos
    from lamplighter.slurm.chaos.inject import ChaosContext, ChaosError, inject, observe_recovery
    from lamplighter.slurm.chaos.runner import run_schedule

    try:
        s = _load_sub(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"lamplighter chaos: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    cluster = open_cluster(s) if open_cluster is not None else None
    ctx = ChaosContext(s, api_for(s.slurm_conf), gpusim_root=args.gpusim_root, cluster=cluster)
    try:
        if args.once:
            rec = inject(ctx, args.once, args.group)
            print(json.dumps(rec))
            if not args.no_wait:
                print(json.dumps(observe_recovery(ctx, rec, args.recovery_timeout)))
            return 0
        if not args.chaos:
            print("lamplighter chaos: error: give --once KIND or --chaos SPEC", file=sys.stderr)
            return EXIT_INVALID
        cfg = parse_chaos(args.chaos)
        for line in run_schedule(ctx, cfg, args.recovery_timeout):
            print(json.dumps(line), flush=True)
        return 0
    except (ChaosError, ChaosSpecError, SlurmError) as e:
        print(f"lamplighter chaos: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 0
