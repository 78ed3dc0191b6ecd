"""Slurm's own latencies on the test cluster, without lamplighter: `python -m bench.slurm_timings [--reps 3]`.

What docs/results.md says Slurm costs before lamplighter does anything, measured on
the lab's real slurmctld and slurmd (Debian's slurm-wlm, `SlurmdTimeout=3`,
`ReturnToService=2`, `cred_expire=5`: see lab/testcluster_conf.py). Each
repetition starts a fresh 3-node cluster and times, in order:

  start        cluster start (munged, slurmctld, 3 slurmd) to every node registered
  sbatch       sbatch of a one-node job to RUNNING
  requeue      `scontrol requeue` + `StartTime=now` once PENDING, to RUNNING again
  drain        drain the job's node + requeue, to RUNNING on another node
  node-crash   SIGKILL of the job's node (slurmd and the job die) to RUNNING on another
               node, by Slurm alone: the node is marked DOWN after SlurmdTimeout and the
               job requeued (JobRequeue=1)

Writes bench/results/slurm_timings.json (each repetition's seconds, and median
and range per step) and slurm_timings.png. Polls `scontrol show job` every 50 ms,
so each time is late by up to that much plus one scontrol call.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.jobspec import BUILD
from bench.plots import _plt
from bench.results_io import GENERATED_NOTE, RESULTS, spread, write_result
from lamplighter.lab.testcluster import TestCluster, pick_port_range, slurm_installed, wait_until
from lamplighter.slurm.parsers import JobInfo, parse_sbatch_parsable, parse_scontrol_job

STEPS = ("start", "sbatch", "requeue", "drain", "node-crash")
LABELS = {
    "start": "cluster start to all nodes registered",
    "sbatch": "sbatch to RUNNING",
    "requeue": "requeue + StartTime=now to RUNNING",
    "drain": "drain + requeue to RUNNING elsewhere",
    "node-crash": "node crash to RUNNING elsewhere (Slurm alone)",
}
POLL_S = 0.05
CRASH_TIMEOUT_S = 120.0  # SlurmdTimeout=3, but slurmctld checks nodes on its own period


class Timings:
    """One repetition on one fresh cluster; `times` holds its seconds per step."""

    def __init__(self, root: Path) -> None:
        self.cluster = TestCluster(root, nodes=3, base_port=pick_port_range(4))
        self.cli = self.cluster.cli()
        self.root = root
        self.times: dict[str, float] = {}

    def job(self, jid: int) -> JobInfo:
        return parse_scontrol_job(self.cli.run("scontrol", "show", "job", str(jid)))

    def until(self, jid: int, ok: Callable[[JobInfo], bool], timeout: float, what: str) -> JobInfo:
        return wait_until(lambda: j if ok(j := self.job(jid)) else None, timeout, what, interval=POLL_S)

    def timed(self, step: str, act: Callable[[], object]) -> None:
        t0 = time.monotonic()
        act()
        self.times[step] = round(time.monotonic() - t0, 3)
        print(f"  {LABELS[step]}: {self.times[step]:.2f} s", flush=True)

    def run(self) -> dict[str, float]:
        self.timed("start", self.cluster.up)  # returns once every node is registered
        script = self.root / "job.sh"
        script.write_text("#!/bin/sh\nexec sleep 600\n")
        jid = 0

        def sbatch() -> None:
            nonlocal jid
            argv = ["--parsable", "--requeue", "-N1", f"--output={self.root}/job-%j.out", str(script)]
            jid = parse_sbatch_parsable(self.cli.run("sbatch", *argv))
            self.until(jid, lambda j: j.running, 60, "the job to run")

        self.timed("sbatch", sbatch)

        def requeue() -> None:
            self.cli.run("scontrol", "requeue", str(jid))
            self.until(jid, lambda j: j.pending, 30, "the job to be pending")
            self.cli.run("scontrol", "update", f"jobid={jid}", "StartTime=now")
            self.until(jid, lambda j: j.running, 60, "the requeued job to run")

        self.timed("requeue", requeue)
        node = self.job(jid).node_list

        def drain() -> None:
            self.cli.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=bench")
            self.cli.run("scontrol", "requeue", str(jid))
            self.until(jid, lambda j: j.pending, 30, "the job to be pending")
            self.cli.run("scontrol", "update", f"jobid={jid}", "StartTime=now")
            self.until(jid, lambda j: j.running and j.node_list != node, 60, "the job to run elsewhere")

        self.timed("drain", drain)
        self.cli.run("scontrol", "update", f"nodename={node}", "state=resume")
        victim = self.job(jid).node_list
        assert victim is not None

        def crash() -> None:
            self.cluster.crash_node(victim)
            self.until(
                jid, lambda j: j.running and j.node_list != victim, CRASH_TIMEOUT_S, "the job to run after a crash"
            )

        self.timed("node-crash", crash)
        return self.times


BEGIN, END = "<!-- slurm-timings -->", "<!-- /slurm-timings -->"


def render_block(results: Path = RESULTS) -> str:
    """docs/results.md's table of these timings, from slurm_timings.json alone."""
    path = results / "slurm_timings.json"
    if not path.exists():
        return "\n".join([BEGIN, GENERATED_NOTE, "No `make bench-slurm` result is kept (slurm_timings.json).", END])
    doc = json.loads(path.read_text())
    env = doc["environment"]
    lines = [
        BEGIN,
        GENERATED_NOTE,
        f"Slurm alone on the test cluster (`make bench-slurm`, {doc['reps']} repetitions on fresh 3-node clusters, "
        f"at commit {env['commit']}, {env['when']}; `bench/results/slurm_timings.json`), seconds:",
        "",
        "| step | median | range |",
        "|---|---|---|",
    ]
    for step in STEPS:
        cell = doc["summary"].get(step)
        if cell and cell.get("n"):
            lines.append(f"| {LABELS[step]} | {cell['median']:.2f} | {cell['min']:.2f}-{cell['max']:.2f} |")
    return "\n".join([*lines, END])


def plot(summary: dict[str, Any], reps: int) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    steps = [s for s in STEPS if summary.get(s, {}).get("n")]
    med = [summary[s]["median"] for s in steps]
    err = [
        [summary[s]["median"] - summary[s]["min"] for s in steps],
        [summary[s]["max"] - summary[s]["median"] for s in steps],
    ]
    ax.barh(range(len(steps)), med, xerr=err, capsize=3, color="tab:blue")
    ax.set_yticks(range(len(steps)))
    ax.set_yticklabels([LABELS[s] for s in steps], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds (median and range)")
    ax.set_title(f"Slurm alone on the test cluster ({reps} repetitions)", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(RESULTS / "slurm_timings.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.slurm_timings", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=3, help="repetitions, each on a fresh cluster (default 3)")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    missing = slurm_installed()
    if missing:
        print(f"bench.slurm_timings: {missing}", file=sys.stderr)
        return 2
    runs: list[dict[str, float]] = []
    for rep in range(args.reps):
        root = BUILD / "slurm_timings" / f"rep{rep}"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        print(f"repetition {rep + 1}/{args.reps} under {root}", flush=True)
        t = Timings(root)
        try:
            runs.append(t.run())
        finally:
            t.cluster.down()
    summary = {s: spread([r[s] for r in runs if s in r]) for s in STEPS if any(s in r for r in runs)}
    write_result("slurm_timings", {"reps": args.reps, "labels": LABELS, "runs": runs, "summary": summary})
    plot(summary, args.reps)
    for s, cell in summary.items():
        print(f"{LABELS[s]}: {cell['median']:.2f} s [{cell['min']:.2f}-{cell['max']:.2f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
