"""End the job's Lighthouse job once the job is over: `python -m lamplighter.slurm.submit.release` (torch-free).

The Lighthouse job's script runs this beside the Lighthouse. It reads the
group jobs from the submission record in the run directory (only a complete
record naming this Lighthouse job: a record left by an earlier submission is
not ours) and returns once every group job has been out of the queue
(ended, or purged by Slurm) for `--grace` seconds, or at once when every one
ended COMPLETED and the job reached its target (its run dir's `completed`). The script then stops the
Lighthouse and exits 0, so the Lighthouse job ends COMPLETED.

Why here and not in a job of its own: a separate release job needs a CPU
beside the Lighthouse on the head node, and with as many jobs as the head
node has CPUs, every Lighthouse job held one while every release job waited
for one, forever. The grace covers a group whose job ends FAILED for a moment
before its node daemon requeues it (PENDING again). A Slurm error counts as
"still queued": a slurmctld hiccup never ends the Lighthouse early.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from lamplighter.rundir.contract import RunPaths
from lamplighter.slurm.actions import SlurmActions, SlurmApi
from lamplighter.slurm.run import SlurmCli
from lamplighter.slurm.submit.submission import INCOMPLETE, has_ended, job_states, load

GRACE_S = 15.0  # longer than a node daemon takes to requeue a failed group (about a second)
# One squeue of every group a poll: at 5 s that was 0.4 slurmctld RPCs a second per job, half of all the head's
# (make scale); at 30 s it is 0.07.
POLL_S = 30.0
# Once a group has reached the target (the run dir's `completed`, seen with a stat and no RPC) the others end
# within seconds: polls come this often then. A finished job's Lighthouse ended 30-60 s after its groups with
# the 30-s poll and the grace; now within about this.
FINISHING_POLL_S = 2.0  # and with every group COMPLETED then, no grace (see decide)
LOOK_S = 1.0  # how often the run dir is looked at between polls


@dataclass(frozen=True)
class ReleaseDecision:
    release: bool
    clear_since: float | None  # since when every group has been out of the queue
    reason: str


def decide(
    now: float,
    states: Mapping[int, str] | None,
    clear_since: float | None,
    grace_s: float,
    reached_target: bool = False,
) -> ReleaseDecision:
    """Release when every group job has been out of the queue for `grace_s` (None: groups not known yet), or at
    once when every one ended COMPLETED in a job that reached its target: the grace waits for a requeue, and no
    lamplighter part requeues a completed group."""
    if states is None:
        return ReleaseDecision(False, None, "waiting for the submission record that names this Lighthouse job")
    if not states:
        return ReleaseDecision(False, None, "the submission names no group job")
    queued = sorted(j for j, s in states.items() if not has_ended(s))
    if queued:
        return ReleaseDecision(False, None, f"group jobs still queued: {', '.join(f'{j} {states[j]}' for j in queued)}")
    since = now if clear_since is None else clear_since
    if reached_target and all(s == "COMPLETED" for s in states.values()):
        return ReleaseDecision(
            True, since, f"every group job COMPLETED and the job reached its target ({_states(states)})"
        )
    if now - since >= grace_s:
        return ReleaseDecision(True, since, f"every group job ended ({_states(states)}) {now - since:.0f} s ago")
    return ReleaseDecision(False, since, f"every group job ended ({_states(states)}); confirming for {grace_s:.0f} s")


def _states(states: Mapping[int, str]) -> str:
    return ", ".join(f"{j} {s}" for j, s in sorted(states.items()))


def group_jobs(run_dir: Path, lighthouse_job_id: int) -> list[int] | None:
    """The group job ids of the complete submission of this Lighthouse job, else None (not yet, or not ours)."""
    try:
        sub = load(run_dir)
    except (OSError, ValueError):
        return None
    if sub.lighthouse_job_id != lighthouse_job_id or INCOMPLETE in sub.extra:
        return None
    return list(sub.groups.values())


def next_poll(last: float, clear_since: float | None, finishing: bool, grace_s: float, poll_s: float) -> float:
    """When to ask Slurm next: the grace's end once every group is out, soon once the job is finishing."""
    due = last + (min(poll_s, FINISHING_POLL_S) if finishing else poll_s)
    return min(due, clear_since + grace_s) if clear_since is not None else due


def wait_for_release(
    run_dir: Path,
    lighthouse_job_id: int,
    api: SlurmApi,
    *,
    grace_s: float = GRACE_S,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = print,
) -> ReleaseDecision:
    clear_since: float | None = None
    said = ""
    completed = RunPaths(run_dir).completed()
    while True:
        groups = group_jobs(run_dir, lighthouse_job_id)
        states = None if groups is None else job_states(api, groups)
        last = clock()
        d = decide(last, states, clear_since, grace_s, reached_target=completed.exists())
        clear_since = d.clear_since
        if d.release or d.reason.split(":")[0] != said:
            said = d.reason.split(":")[0]
            log(f"lamplighter release: {d.reason}")
        if d.release:
            return d
        while (wait := next_poll(last, clear_since, completed.exists(), grace_s, poll_s) - clock()) > 0:
            sleep(min(LOOK_S, wait))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lamplighter.slurm.submit.release",
        description="Return once every replica group job of this Lighthouse job's submission has left the queue "
        "(run by the Lighthouse job's script, which then stops the Lighthouse).",
    )
    ap.add_argument("--run-dir", required=True, type=Path, help="the job's run directory (submission.json)")
    ap.add_argument("--job-id", type=int, default=None, help="this Lighthouse job's Slurm id (default $SLURM_JOB_ID)")
    ap.add_argument("--slurm-conf", default=None, help="SLURM_CONF for the Slurm commands")
    ap.add_argument(
        "--grace", type=float, default=GRACE_S, help=f"seconds all groups stay ended (default {GRACE_S:.0f})"
    )
    ap.add_argument("--poll", type=float, default=POLL_S, help=f"seconds between checks (default {POLL_S:.0f})")
    a = ap.parse_args(argv)
    job_id = a.job_id if a.job_id is not None else os.environ.get("SLURM_JOB_ID")
    if job_id is None:
        print("lamplighter release: no --job-id and no $SLURM_JOB_ID (run it from the Lighthouse job)", file=sys.stderr)
        return 2
    api = SlurmActions(SlurmCli(slurm_conf=a.slurm_conf))
    wait_for_release(a.run_dir, int(job_id), api, grace_s=a.grace, poll_s=a.poll, log=lambda m: print(m, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
