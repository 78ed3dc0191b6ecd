"""`lamplighter local CONFIG [--chaos SPEC] [--report DIR] [--run-dir DIR] [--steps N] [--no-live]`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

HELP = "run the Lighthouse and the replica groups on this machine, supervised, optionally with chaos"


EPILOG = """\
what you get: a live table (per group: step, loss, state, restarts; steps/s), then a summary
and RUN_DIR/report/report.json + timeline.png: every fault with its detection, restart and
first-commit times, committed steps, steps lost (must be 0), weights identical, goodput, and
how many chaos faults were planned within the run and how many struck (random draws are made
as the run goes, so none is counted past its end; a schedule's events after the end are).
exit status: 0 target reached with nothing lost and identical weights, 1 not, 2 bad input.
Ctrl-C, SIGTERM and SIGHUP end the groups and the Lighthouse, write the report and exit 1.
`echo N > RUN_DIR/stop-at` makes the running job stop at step N (the reference trainer
reads it about once a second; the report judges the target against it).

examples:
  lamplighter local configs/demo.yaml
  lamplighter local configs/demo.yaml --chaos mtbf=20s,seed=3,kinds=kill,hang --steps 1000
  lamplighter local configs/demo.yaml --chaos @faults.yaml --run-dir runs/try2
  lamplighter local configs/demo.yaml --baseline auto        # also against a fault-free run first
  lamplighter local configs/demo.yaml --baseline runs/clean/report/report.json
  lamplighter local configs/demo.yaml --chaos off --set groups.count=2
"""


def add_parser(subparsers: Any) -> None:
    from lamplighter.commands.validate import add_override_args

    p = subparsers.add_parser(
        "local", help=HELP, description=HELP, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("config", help="job config (YAML)")
    p.add_argument(
        "--chaos",
        default=None,
        help="inject faults: 'mtbf=20s[,seed=N][,kinds=kill,hang,exception,lighthouse-kill][,max=N][,mode=M]' or "
        "'@schedule.yaml'; 'off' disables the config's chaos section. mode=exact fires each fault at its "
        "time whatever its target's state (a schedule's default); gentle waits for a healthy target with "
        "a live peer left (random draws' default)",
    )
    p.add_argument("--report", default=None, help="where report.json and timeline.png go (default RUN_DIR/report)")
    p.add_argument("--run-dir", default=None, help="run directory (default: the config's run_dir, or runs/<name>)")
    p.add_argument("--steps", type=int, default=None, help="override trainer.steps")
    p.add_argument(
        "--baseline",
        default=None,
        metavar="auto|REPORT.json|SAMPLES_PER_S",
        help="a second yardstick for goodput (the report's goodput_vs_fault_free_run; goodput itself is "
        "against this run's own steady stretches): 'auto' runs the same job without faults first "
        "(in RUN_DIR/baseline), a fault-free run's report.json (same steps and groups), or a number",
    )
    p.add_argument("--no-live", action="store_true", help="plain progress lines instead of the live table")
    add_override_args(p)
    p.set_defaults(func=run_local)


def run_local(args: argparse.Namespace) -> int:
    """0: the target was reached with nothing lost and identical weights; 1: not; 2: bad input."""
    from pydantic import ValidationError

    from lamplighter.chaos.plan import ChaosSpecError, parse_chaos
    from lamplighter.commands.validate import report_invalid
    from lamplighter.configs.loader import ConfigError, load_job
    from lamplighter.configs.schema import ChaosConfig
    from lamplighter.local.run import LocalModeError, LocalOptions, LocalRun
    from lamplighter.local.termination import Terminated, interrupt_on_termination
    from lamplighter.trainer.adapter import job_run_dir

    try:
        job = load_job(args.config, args.overrides, os.environ)
    except ConfigError as e:
        return report_invalid(e)
    try:
        if args.steps is not None:
            job.trainer.steps = args.steps
        chaos: ChaosConfig = job.chaos
        if args.chaos == "off":
            chaos = ChaosConfig.model_validate({})
        elif args.chaos:
            chaos = parse_chaos(args.chaos)
        run_dir = Path(args.run_dir or job_run_dir(job))
        report_dir = Path(args.report) if args.report else run_dir / "report"
        with interrupt_on_termination():
            baseline = resolve_baseline(args.baseline, job, run_dir, live=not args.no_live)
            run = LocalRun(
                job,
                LocalOptions(
                    run_dir=run_dir, report_dir=report_dir, chaos=chaos, live=not args.no_live, baseline=baseline
                ),
            )
            report = run.run()
    except Terminated as e:
        # Between the two runs of --baseline auto: the fault-free one has already ended its processes.
        print(f"lamplighter local: stopped by {e}, before the faulted run started", file=sys.stderr)
        return 1
    except (ChaosSpecError, LocalModeError, ValidationError, ValueError, OSError) as e:
        print(f"lamplighter local: {e}", file=sys.stderr)
        return 2
    from lamplighter.report.build import run_ok

    ok = run_ok(report)
    return 0 if ok else 1


def resolve_baseline(value: str | None, job: Any, run_dir: Path, *, live: bool) -> Any:
    """The Baseline --baseline asks for (None without one); `auto` runs the job without faults first."""
    from lamplighter.configs.schema import ChaosConfig
    from lamplighter.local.run import LocalOptions, LocalRun
    from lamplighter.local.termination import Terminated
    from lamplighter.report.baseline import Baseline, BaselineError, from_report, parse_baseline, read_report

    if value is None:
        return None
    spec = parse_baseline(value)
    n, groups = job.trainer.steps, job.groups.count
    if spec.rate is not None:
        return Baseline(spec.rate, "given (--baseline)")
    if spec.report is not None:
        return read_report(spec.report, target_steps=n, groups=groups)
    where = run_dir / "baseline"
    print(f"fault-free run first, for goodput against it: {n} steps, {groups} groups, in {where}", flush=True)
    clean = LocalRun(
        job.model_copy(deep=True),
        LocalOptions(run_dir=where, report_dir=where / "report", chaos=ChaosConfig.model_validate({}), live=live),
    )
    report = clean.run()
    if report.get("interrupted"):
        # Ctrl-C or SIGTERM during the fault-free run stops the command, not just that run.
        raise Terminated("an interrupt during the fault-free run")
    try:
        return from_report(report, str(where / "report" / "report.json"), target_steps=n, groups=groups)
    except BaselineError as e:
        print(f"WARNING: no goodput against a fault-free run: it cannot be the baseline: {e}", flush=True)
        return None
