"""`make demo-results`: run the three demos once each at one clean commit and keep their reports.

    python -m bench.demos                  # make demo, make demo-slurm, make demo-bare: about 15 minutes
    python -m bench.demos --only local     # some of them

Each demo runs as its make target does and writes its report; this keeps it as
bench/results/demo-<mode>.json (with the commit and environment it ran in, its
command and exit code, and for `make demo` its fault-free run's numbers) and
its timeline as demo-<mode>-timeline.png. The demo tables in docs/results.md are printed
from those files by `python -m bench.report --write docs/results.md`, which this runs
at the end. A demo that fails is kept as failed, not skipped: docs/results.md then
says so. `make demo-bare` needs root; without it that demo is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.demo_tables import MODES, result_name
from bench.jobspec import BUILD, REPO
from bench.results_io import RESULTS, uncommitted_changes, write_result

LOCAL_CONFIG = REPO / "configs" / "demo.yaml"


def command(mode: str, where: Path) -> list[str]:
    """The make target's command, with its output under `where`."""
    if mode == "local":
        return [
            sys.executable,
            "-m",
            "lamplighter",
            "local",
            str(LOCAL_CONFIG),
            "--baseline",
            "auto",
            "--run-dir",
            str(where),
        ]
    module = "lamplighter.lab.demo" if mode == "slurm" else "lamplighter.lab.demo_bare"
    return [sys.executable, "-m", module, "--dir", str(where)]


def report_paths(mode: str, where: Path) -> tuple[Path, Path | None]:
    """(the faulted run's report, the fault-free run's report or None)."""
    if mode == "local":
        return where / "report" / "report.json", where / "baseline" / "report" / "report.json"
    return where / "report.json", None


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def run_one(mode: str, results: Path) -> int:
    where = BUILD / "demo-results" / mode
    shutil.rmtree(where, ignore_errors=True)  # a local run dir left over would be resumed, not started afresh
    where.mkdir(parents=True)
    cmd = command(mode, where)
    print(f"== {MODES[mode]}: {' '.join(cmd)}", flush=True)
    t0 = time.time()
    rc = subprocess.run(cmd, cwd=REPO).returncode
    report_path, baseline_path = report_paths(mode, where)
    report = read_json(report_path)
    if report is None:
        print(f"{MODES[mode]}: exit code {rc} and no report at {report_path}: nothing kept", file=sys.stderr)
        return rc or 1
    doc: dict[str, Any] = {"command": cmd, "exit_code": rc, "wall_s": round(time.time() - t0, 1), "report": report}
    if mode == "local":
        from lamplighter.configs.loader import load_job

        job = load_job(LOCAL_CONFIG, [], {})
        report.setdefault("hang_timeout_s", job.health.hang_timeout_s)
        base = read_json(baseline_path) if baseline_path else None
        if base is not None:
            keys = ("steps_committed", "target_steps", "wall_s", "useful_samples_per_s", "steps_lost")
            doc["baseline"] = {k: base.get(k) for k in keys}
    write_result(result_name(mode), doc)
    timeline = report.get("timeline")
    if timeline and Path(timeline).exists():
        shutil.copyfile(timeline, results / f"{result_name(mode)}-timeline.png")
    print(f"{MODES[mode]}: exit code {rc}, kept as {results / (result_name(mode) + '.json')}", flush=True)
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.demos", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", default=",".join(MODES), help=f"comma-separated, of: {', '.join(MODES)}")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.only.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        ap.error(f"--only: unknown {bad or 'nothing'} (known: {', '.join(MODES)})")
    dirty = uncommitted_changes()
    if dirty:
        print(f"bench.demos: uncommitted changes to {', '.join(dirty)}: commit them first", file=sys.stderr)
        return 2
    if "bare" in modes and os.geteuid() != 0:
        print("bench.demos: make demo-bare needs root: left out", file=sys.stderr)
        modes.remove("bare")
    failed = [m for m in modes if run_one(m, RESULTS) != 0]
    from bench.report import main as report_main

    report_main(["--write", str(REPO / "docs" / "results.md")])
    if failed:
        print(f"bench.demos: failed: {', '.join(failed)} (kept as such)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
