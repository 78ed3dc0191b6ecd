"""`lamplighter render FILE --out DIR`: write a job's sbatch scripts without submitting them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from lamplighter.commands.validate import add_override_args, report_invalid
from lamplighter.slurm.submit.render import RenderError, render_job


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("render", help="write a job's sbatch scripts (Lighthouse + one per replica group)")
    p.add_argument("file", help="the job's YAML file")
    p.add_argument("--out", required=True, help="folder for the scripts")
    add_override_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # The loader pulls in YAML handling; only this command needs it.
    from lamplighter.configs.loader import ConfigError, load_job

    try:
        job = load_job(args.file, args.overrides, os.environ)
    except ConfigError as e:
        return report_invalid(e)
    try:
        paths = render_job(job, Path(args.out), run_files=False)  # nothing outside --out: submit writes the run dir
    except (RenderError, OSError) as e:
        print(f"lamplighter render {args.file}: {e}", file=sys.stderr)
        return 1
    for p in paths:
        print(p)
    return 0
