"""`lamplighter list`: the jobs you submitted, newest first, from your own index (slurm/submit/job_index.py).

One line each: the job's name, its state, when it was submitted and its run
directory. The state is its groups' Slurm states, counted (`3 RUNNING, 1
PENDING`), asked of Slurm in ONE `squeue` for every job listed (one per
cluster, when jobs were submitted to several through slurm.slurm_conf);
`--no-slurm` asks nothing. A job Slurm no longer remembers (MinJobAge
passed) is GONE; when Slurm does not answer, UNKNOWN. `completed`: the job
reached its target (its run directory's marker).

Root keeps no index (`lamplighter submit` as root remembers nothing), so root
is refused: it would read job records and Slurm configs a user points at.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lamplighter.rundir.contract import RunPaths
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.submit.job_index import index_path, read_index
from lamplighter.slurm.submit.submission import SUBMISSION_FILE, Submission, job_states, load

EXIT_INVALID = 2


@dataclass
class Listed:
    name: str
    run_dir: str
    submitted_at: float | None
    sub: Submission | None = None
    problem: str | None = None  # why there is no submission record to ask Slurm about
    groups: dict[int, str] = field(default_factory=dict)  # group -> its Slurm job's state (asked)
    lighthouse: str | None = None
    completed: bool = False

    def state(self, asked: bool) -> str | None:
        if self.problem:
            return self.problem
        if not asked:
            return None
        counts = Counter(self.groups.values())
        text = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or "no group"
        return f"{text} (completed)" if self.completed else text

    def to_json(self, asked: bool) -> dict[str, Any]:
        s = self.sub
        return {
            "name": self.name,
            "run_dir": self.run_dir,
            "submitted_at": self.submitted_at,
            "state": self.state(asked),
            "completed": self.completed,
            "groups": None
            if s is None
            else {str(g): {"job_id": j, "state": self.groups.get(g) if asked else None} for g, j in s.groups.items()},
            "lighthouse": None
            if s is None or s.lighthouse_job_id is None
            else {"job_id": s.lighthouse_job_id, "state": self.lighthouse},
        }


def read_listed(index: Path) -> list[Listed]:
    """The index's jobs, newest first, each with its submission record (or why it has none)."""
    out = []
    for name, entry in read_index(index).items():
        run_dir = str(entry.get("run_dir") or "")
        raw = entry.get("submitted_at")
        at = float(raw) if isinstance(raw, (int, float)) else None
        item = Listed(name, run_dir, at)
        rd = Path(run_dir)
        if not rd.is_dir():
            item.problem = "run dir missing"
        elif not (rd / SUBMISSION_FILE).is_file():
            item.problem = "no submission record"
        else:
            try:
                item.sub = load(rd)
            except (OSError, ValueError):
                item.problem = "submission record damaged"
            item.completed = RunPaths(rd).completed().exists()
        out.append(item)
    return sorted(out, key=lambda i: -(i.submitted_at or 0.0))


def ask_slurm(items: Iterable[Listed], api_for: Callable[[str | None], SlurmApi]) -> None:
    """Every listed job's Slurm states in ONE squeue per cluster (slurm_conf), however many jobs and groups."""
    by_conf: dict[str | None, list[Listed]] = {}
    for item in items:
        if item.sub is not None:
            by_conf.setdefault(item.sub.slurm_conf, []).append(item)
    for conf, jobs in by_conf.items():
        ids = [j for item in jobs if item.sub is not None for j in item.sub.all_job_ids()]
        states = job_states(api_for(conf), ids)
        for item in jobs:
            s = item.sub
            if s is None:
                continue
            item.groups = {g: states.get(j, "UNKNOWN") for g, j in sorted(s.groups.items())}
            item.lighthouse = None if s.lighthouse_job_id is None else states.get(s.lighthouse_job_id)


def format_lines(items: list[Listed], asked: bool) -> str:
    rows = [("NAME", "STATE", "SUBMITTED", "RUN DIR")]
    for i in items:
        when = "-" if i.submitted_at is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(i.submitted_at))
        rows.append((i.name, i.state(asked) or "-", when, i.run_dir))
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    return "\n".join("  ".join(r[c].ljust(widths[c]) for c in range(3)) + "  " + r[3] for r in rows)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "list",
        help="the jobs you submitted, newest first: name, state of their groups, submitted at, run dir",
        description=__doc__ or "",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  lamplighter list\n  lamplighter list --no-slurm        # from the index alone\n"
        "  lamplighter list --json | jq -r '.[0].name'\n\n"
        "exit status: 0 listed (Slurm not answering shows as UNKNOWN); 2 run as root",
    )
    p.add_argument("--no-slurm", action="store_true", help="ask Slurm nothing: no states")
    p.add_argument("--json", action="store_true", help="a JSON list, newest first")
    p.set_defaults(func=run_list)


def run_list(args: argparse.Namespace, api_for: Callable[[str | None], SlurmApi] | None = None) -> int:
    if os.geteuid() == 0:
        print(
            "lamplighter list: error: root keeps no index of jobs (submit as root remembers none): "
            "run it as the user who submitted, or give root's commands a run directory",
            file=sys.stderr,
        )
        return EXIT_INVALID
    index = index_path()
    items = read_listed(index)
    asked = not args.no_slurm
    if asked:
        if api_for is None:
            from lamplighter.commands.job import api_for as real

            api_for = real
        ask_slurm(items, api_for)
    if args.json:
        print(json.dumps([i.to_json(asked) for i in items], indent=2))
    elif not items:
        print(f"no jobs in {index}: `lamplighter submit` adds each job you submit")
    else:
        print(format_lines(items, asked))
    return 0
