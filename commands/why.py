"""`lamplighter why JOB`: why were this job's groups killed, requeued or given up on, and which nodes drained.

Reads the daemons' action lines about the job from `<run_dir>/actions.jsonl`
(every node's daemon appends the lines about a job to its run directory,
which all nodes share) and, with --log, node-local action logs too
(`/var/lib/lamplighter/actions.jsonl`, e.g. copied from a node). Prints per
group and attempt each action in time order, with node, reason and the
observation behind it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lamplighter.configs.loader import ConfigError
from lamplighter.rundir.action_history import history, parse_lines, render
from lamplighter.rundir.actions import ACTIONS_FILE
from lamplighter.slurm.submit.submission import SUBMISSION_FILE, find_run_dir, load


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "why",
        help="why a job's groups were requeued, killed or given up on: the daemons' actions, per group and attempt",
        description=__doc__ or "",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  lamplighter why llama3-8b\n  lamplighter why runs/llama3-8b --json\n"
        "  lamplighter why llama3-8b --log /var/lib/lamplighter/actions.jsonl",
    )
    p.add_argument(
        "job",
        metavar="JOB",
        help="job name (as submitted by you, in $LAMPLIGHTER_RUNS, or runs/<name>), run directory, or config file",
    )
    p.add_argument("--run-dir", default=None, help="the job's run directory")
    p.add_argument("--log", action="append", default=[], metavar="FILE", help="also read this action log (repeatable)")
    p.add_argument("--json", action="store_true", help="print the history as JSON")
    p.set_defaults(func=run_why)


def job_name_in(run_dir: Path) -> str:
    """The job's name from its job.json (render and submit write it), else the run directory's name."""
    try:
        name = json.loads((run_dir / "job.json").read_text()).get("name")
    except (OSError, ValueError, AttributeError):
        return run_dir.name
    return name if isinstance(name, str) and name else run_dir.name


def run_why(args: argparse.Namespace) -> int:
    try:
        run_dir = find_run_dir(args.job, args.run_dir)
    except (ConfigError, OSError) as e:  # a config file that does not load, a name found nowhere
        print(f"lamplighter why: error: {e}", file=sys.stderr)
        return 2
    if not run_dir.is_dir():
        # Never "nothing happened" for a job that is not there.
        print(f"lamplighter why: error: no run directory at {run_dir}: give --run-dir", file=sys.stderr)
        return 2
    job_ids: dict[str, str] = {}
    job_name = job_name_in(run_dir)
    if (run_dir / SUBMISSION_FILE).exists():
        try:
            s = load(run_dir)
        except ValueError as e:
            print(f"lamplighter why: warning: {e}; placing actions by the group names in them", file=sys.stderr)
        else:
            job_name = s.job
            job_ids = {str(j): f"{s.job}/g{g}" for g, j in s.groups.items()}
            # A group `lamplighter revive` submitted afresh: its earlier Slurm jobs' actions are its history too.
            for r in s.extra.get("revived") or []:
                if isinstance(r, dict) and r.get("old_job_id") is not None:
                    job_ids.setdefault(str(r["old_job_id"]), f"{s.job}/g{r.get('group')}")
    sources = [run_dir / ACTIONS_FILE] + [Path(p) for p in args.log]
    lines: list[str] = []
    read = []
    for path in sources:
        try:
            lines += path.read_text(errors="replace").splitlines()
            read.append(str(path))
        except FileNotFoundError:
            if path != sources[0]:
                print(f"lamplighter why: error: no action log {path}", file=sys.stderr)
                return 2
        except OSError as e:
            print(f"lamplighter why: error: cannot read {path}: {e}", file=sys.stderr)
            return 2
    records, bad = parse_lines(lines)
    h = history(records, job_ids, job_name)
    h.unreadable = bad
    if bad:
        print(f"lamplighter why: warning: {bad} line(s) that are no action record skipped", file=sys.stderr)
    if args.json:
        print(json.dumps({"job": job_name, "run_dir": str(run_dir), "sources": read, **h.to_json()}, default=str))
        return 0
    print(render(h, f"job {job_name} (run dir {run_dir}; read {', '.join(read) or 'nothing: no action log yet'})"))
    return 0
