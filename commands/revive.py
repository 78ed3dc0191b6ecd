"""`lamplighter revive JOB --group N`: bring back a group lamplighter gave up on, as its owner.

A group's restart budget (restart.budget_per_group) counts its Slurm job's
restarts (Slurm's Restarts, less the renewals before the time limit), and a
node daemon that gave a job up ignores it from then on (supervisor/node_policy.py);
neither can be reset from outside, and a requeue of that job would not bring
the budget back. So revive submits the group's rendered script
(`<run_dir>/sbatch/group-N.sbatch`) afresh: a new Slurm job, whose restart
count, budget, crash-loop window and in-job restarts all start at 0, after the
job's Lighthouse job as `submit` does; the submission record then names it (so
status, logs, cancel and the Lighthouse job's end follow it) and remembers the
old one. A group whose job Slurm merely holds (JobHeldUser, JobHeldAdmin, a
failed launch) with budget left is released instead (`scontrol release`).

Given up, and so revived: a daemon's give_up line about the group's Slurm job in
`<run_dir>/actions.jsonl`; or its job ended (FAILED, TIMEOUT, NODE_FAIL, ...)
with its budget spent (as the head judges it, supervisor/head/failed_jobs.py), or ended
a minute ago (SETTLE_S) with nobody requeueing it, or forgotten by Slurm; or held. Refused
(exit 2): a group that runs or is queued, one that completed or was cancelled
by a person, a job that reached its target, and a job whose Lighthouse job has
ended (the whole job is over: submit it again). It touches only your own run
directory, records, scripts and Slurm jobs (root's: only root's own, never a
user's script submitted as root).

What it did and why is appended to the job's action log, where `lamplighter why`
shows it in the group's history (rundir/actions.py's line writer,
rundir/actions.py's format).
"""

from __future__ import annotations

import argparse
import getpass
import os
import socket
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lamplighter.rundir.actions import ACTIONS_FILE as ACTIONS
from lamplighter.rundir.contract import RunPaths
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.parsers import LAUNCH_FAILED_HELD, JobInfo
from lamplighter.slurm.run import SlurmError
from lamplighter.slurm.submit.submission import (
    GONE,
    SCRIPTS_DIR,
    SUBMISSION_FILE,
    Submission,
    find_run_dir,
    has_ended,
    load,
    save,
    slurm_forgot,
)

EXIT_INVALID = 2
EXIT_FAILED = 1
REVIVED = "revived"  # in Submission.extra: [{group, old_job_id, new_job_id, t, by}] (why places the old ids)
# Ended this long ago and still not requeued: nobody will (the head's grace for a failed job is 3 s, a node
# daemon requeues within seconds of the exit); sooner, lamplighter may still bring the group back itself.
SETTLE_S = 60.0
HELD_REASONS = frozenset({"jobhelduser", "jobheldadmin", LAUNCH_FAILED_HELD})
# Ended in a way lamplighter restarts from (COMPLETED: the trainer exited 0; CANCELLED: a person).
FAILED_ENDS = frozenset({"FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"})


class Refused(Exception):
    """Not revived, and why, in one line (exit 2)."""


class Failed(Exception):
    """Slurm refused what revive asked (exit 1); the attempt is recorded in the action log all the same."""


@dataclass(frozen=True)
class Seen:
    """What was found about the group: the pure decision's input."""

    group: int
    job_id: int
    state: str  # Slurm's, or GONE
    reason: str | None  # Slurm's reason (a pending job's)
    gave_up: str | None  # a daemon's give_up line about this Slurm job: its reason
    spent: str | None  # the head's verdict on the ended job when it leaves it down (budget spent)
    ended_ago_s: float | None
    completed: bool  # the job reached its target
    lighthouse_job_id: int | None
    lighthouse_state: str | None


@dataclass(frozen=True)
class Plan:
    how: Literal["release", "resubmit"]
    why_down: str
    cancel_old: bool  # resubmit: the old job is still queued (held): cancelled first
    after: int | None  # resubmit: --dependency=after: the job's Lighthouse job


def held(state: str, reason: str | None) -> bool:
    return state == "PENDING" and (reason or "").replace("_", " ").strip().lower() in HELD_REASONS


def decide(seen: Seen) -> Plan:
    """Pure: how to bring the group back, or Refused saying why not."""
    g, j, state = seen.group, seen.job_id, seen.state
    what = f"group {g} (Slurm job {j}"
    if seen.completed:
        raise Refused("the job reached its target (its run dir holds `completed`): nothing to revive")
    if state == "PENDING" and not held(state, seen.reason):
        raise Refused(f"{what}) is PENDING ({seen.reason or 'no reason'}): queued, not given up")
    if state not in ("PENDING", GONE) and not has_ended(state):
        also = "; a daemon gave it up, but it runs: scancel it first to restart it" if seen.gave_up else ""
        raise Refused(f"{what}) is {state}: nothing to revive{also}")
    why = seen.gave_up
    if why is None and state == "PENDING":
        why = f"Slurm holds it ({seen.reason})" + (f"; {seen.spent}" if seen.spent else "")
    elif why is None and state == GONE:
        why = "its Slurm job ended and Slurm has forgotten it (MinJobAge): nobody can requeue it"
    elif why is None and state == "COMPLETED":
        raise Refused(f"{what}) COMPLETED (its trainer exited 0): never given up")
    elif why is None and state == "CANCELLED":
        raise Refused(f"{what}) was CANCELLED by a person, not given up by lamplighter: submit the job again")
    elif why is None and seen.spent is not None:
        why = seen.spent
    elif why is None and state in FAILED_ENDS:
        if seen.ended_ago_s is not None and seen.ended_ago_s < SETTLE_S:
            raise Refused(
                f"{what}) ended {state} {seen.ended_ago_s:.0f} s ago within its restart budget: lamplighter may "
                f"still requeue it; revive it if it is still down in {SETTLE_S - seen.ended_ago_s:.0f} s"
            )
        ago = "" if seen.ended_ago_s is None else f" {seen.ended_ago_s:.0f} s ago"
        why = f"its Slurm job ended {state}{ago} and nobody requeued it"
    elif why is None:
        raise Refused(f"{what}) is {state}: never given up")
    lh_state = seen.lighthouse_state
    if seen.lighthouse_job_id is not None and lh_state is not None and has_ended(lh_state):
        raise Refused(
            f"the job's Lighthouse (Slurm job {seen.lighthouse_job_id}) has ended ({lh_state}): "
            "the whole job is over; submit it again with `lamplighter submit`"
        )
    if state == "PENDING" and seen.gave_up is None and seen.spent is None:
        return Plan("release", why, cancel_old=False, after=None)
    return Plan("resubmit", why, cancel_old=state == "PENDING", after=seen.lighthouse_job_id)


def last_give_up(actions: Path, job_id: int, owner: int) -> tuple[str, int | None] | None:
    """The reason and attempt of the last daemon give_up line about this Slurm job in the job's action log."""
    from lamplighter.rundir.action_history import NO_ATTEMPT, job_refs, parse_lines
    from lamplighter.rundir.owned_file import OwnedFileError, read_owned_tail
    from lamplighter.supervisor.head.failed_jobs import ACTIONS_TAIL_BYTES

    try:
        data, whole = read_owned_tail(actions, owner=owner, max_bytes=ACTIONS_TAIL_BYTES)
    except OwnedFileError:
        return None
    records, _ = parse_lines(data.decode(errors="replace").splitlines()[0 if whole else 1 :])
    found = None
    for rec in records:
        if rec.get("action") != "give_up":
            continue
        for ref_job, _group, attempt in job_refs(rec):
            if ref_job == str(job_id):
                found = (str(rec.get("reason") or "a daemon gave it up"), None if attempt == NO_ATTEMPT else attempt)
    return found


def ended_ago(info: JobInfo, now: float) -> float | None:
    """Seconds since the job ended, from scontrol's EndTime (printed in this machine's time zone)."""
    stamp = info.fields.get("EndTime", "")
    try:
        return max(0.0, now - time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def spent_budget(info: JobInfo, group: int, run_dir: Path, now: float) -> str | None:
    """The head's verdict on an ended group job when it leaves it down (supervisor/head/failed_jobs.py), else None."""
    from lamplighter.configs.loader import ConfigError
    from lamplighter.supervisor.head.failed_jobs import judge, read_attempt

    try:
        verdict = judge(now, read_attempt(info, group, run_dir))
    except ConfigError:
        return None
    return None if verdict.requeue else verdict.reason


def _job(api: SlurmApi, job_id: int) -> JobInfo | None:
    """scontrol show job; None when Slurm has forgotten it; SlurmError when Slurm does not answer."""
    try:
        return api.job(job_id)
    except SlurmError as e:
        if slurm_forgot(e):
            return None
        raise


@dataclass
class Outcome:
    plan: Plan
    old_job_id: int
    new_job_id: int | None
    line: str


def revive(
    run_dir: Path,
    group: int,
    api: SlurmApi,
    *,
    uid: int,
    now: float,
    note: str | None = None,
    dry_run: bool = False,
) -> Outcome:
    """Look, decide, act, record. Refused (exit 2); SlurmError: Slurm did not answer while looking (nothing
    done); Failed: Slurm refused the release or the sbatch (recorded)."""
    # Everything it reads and runs is the invoker's own (root: root's own jobs, as the lab runs them): never a
    # user's script submitted as root, nor a record or Slurm config someone else wrote.
    for path in (run_dir, run_dir / SUBMISSION_FILE):
        try:
            st = os.stat(path)
        except OSError as e:
            raise Refused(f"cannot read {path}: {e.strerror}") from None
        if st.st_uid != uid:
            raise Refused(f"{path} belongs to uid {st.st_uid}, not you (uid {uid}): revive it as its owner")
    try:
        sub = load(run_dir)
    except (FileNotFoundError, ValueError) as e:
        raise Refused(str(e)) from None
    if group not in sub.groups:
        have = ", ".join(str(g) for g in sorted(sub.groups)) or "none"
        raise Refused(f"job {sub.job} has no group {group} (its groups: {have})")
    old = sub.groups[group]
    info = _job(api, old)
    if info is not None and info.user_id not in (None, uid):
        raise Refused(f"Slurm job {old} belongs to uid {info.user_id}, not you (uid {uid})")
    gave = last_give_up(run_dir / ACTIONS, old, uid)
    state = GONE if info is None else info.state
    ended = info is not None and has_ended(info.state)
    judged = info is not None and gave is None and (ended or held(info.state, info.reason))
    lh = sub.lighthouse_job_id
    lh_info = None if lh is None else _job(api, lh)
    seen = Seen(
        group=group,
        job_id=old,
        state=state,
        reason=None if info is None else info.reason,
        gave_up=None if gave is None else gave[0],
        spent=spent_budget(info, group, run_dir, now) if info is not None and judged else None,
        ended_ago_s=ended_ago(info, now) if info is not None and ended else None,
        completed=RunPaths(run_dir).completed().exists(),
        lighthouse_job_id=lh,
        lighthouse_state=None if lh is None else (GONE if lh_info is None else lh_info.state),
    )
    plan = decide(seen)
    attempt = info.restarts if info is not None else (gave[1] if gave else None)
    script = run_dir / SCRIPTS_DIR / f"group-{group}.sbatch"
    if plan.how == "resubmit":
        _check_script(script, uid)
    if dry_run:
        return Outcome(plan, old, None, "")
    new: int | None = None
    error: str | None = None
    try:
        if plan.how == "release":
            api.release(old)
        else:
            if plan.cancel_old:
                api.cancel(old)
            new = api.submit(script, after=plan.after)
            sub.groups[group] = new
            entry = {"group": group, "old_job_id": old, "new_job_id": new, "t": now, "by": _user()}
            sub.extra[REVIVED] = [*sub.extra.get(REVIVED, []), entry]
            save(sub)
    except SlurmError as e:
        error = str(e)
    line = _record(run_dir, sub, group, old, state, attempt, plan, new, error, note, now)
    if error is not None:
        raise Failed(error)
    return Outcome(plan, old, new, line)


def _check_script(script: Path, uid: int) -> None:
    try:
        st = os.lstat(script)
    except OSError:
        raise Refused(f"no group script {script}: `lamplighter render` or submit the job again") from None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
        raise Refused(f"{script} is not a regular file of yours (uid {uid}): not submitted")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def _record(
    run_dir: Path,
    sub: Submission,
    group: int,
    old: int,
    state: str,
    attempt: int | None,
    plan: Plan,
    new: int | None,
    error: str | None,
    note: str | None,
    now: float,
) -> str:
    """The action line in the job's run-dir action log, as the daemons write theirs; `why` shows it."""
    from lamplighter.rundir.actions import append_line, format_action

    by = _user()
    if plan.how == "release":
        did = f"released Slurm job {old} (scontrol release); its restart budget was not spent and is unchanged"
    else:
        did = (
            f"submitted its script afresh as Slurm job {new}"
            + (f" (after Lighthouse job {plan.after})" if plan.after is not None else "")
            + (f", cancelling held job {old}" if plan.cancel_old else "")
            + ": a new job, so its restart count and restart budget start again at 0"
        )
    reason = f"REVIVED by {by}: group {group} was down: {plan.why_down}; {did}" + (f"; note: {note}" if note else "")
    if error is not None:
        reason = f"NOT REVIVED (Slurm refused: {error}): {reason}"
    group_name = f"{sub.job}/g{group}"
    line = format_action(
        now,
        socket.gethostname(),
        "revive",
        str(old),
        reason,
        {"type": "revive", "job_id": str(old), "state": state, "attempt": attempt, "by": by},
        jobs=[{"job_id": str(old), "group": group_name, "attempt": attempt}],
        outcome="failed" if error is not None else "ok",
        result={"how": plan.how, "new_job_id": new, **({"error": error} if error else {})},
        group=group_name,
    )
    append_line(run_dir / ACTIONS, line)
    return line


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "revive",
        help="bring back a group lamplighter gave up on (budget spent, job failed or held): a fresh Slurm job",
        description=__doc__ or "",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  lamplighter why llama3-8b                          # why group 2 was given up\n"
        "  lamplighter revive llama3-8b --group 2 --dry-run   # what revive would do\n"
        '  lamplighter revive llama3-8b --group 2 --reason "node 17 repaired"\n\n'
        "exit status: 0 revived; 1 Slurm did not answer or refused (recorded too); 2 refused: the group\n"
        "runs or is queued, was never given up, the job is over, or bad input (no such job or group)",
    )
    p.add_argument(
        "job",
        metavar="JOB",
        help="job name (as submitted by you, in $LAMPLIGHTER_RUNS, or runs/<name>), run directory, or config file",
    )
    p.add_argument("--group", type=int, required=True, metavar="N", help="the group to bring back")
    p.add_argument("--run-dir", default=None, help="the job's run directory (holds submission.json)")
    p.add_argument("--reason", default=None, metavar="TEXT", help="why you revive it, kept in the action log")
    p.add_argument("--dry-run", action="store_true", help="say what it would do; change nothing")
    p.set_defaults(func=run_revive)


def run_revive(args: argparse.Namespace, api: SlurmApi | None = None) -> int:
    from lamplighter.configs.loader import ConfigError

    if args.reason is not None and any(c in args.reason for c in "\n\r\x00"):
        print("lamplighter revive: error: --reason must be one line", file=sys.stderr)
        return EXIT_INVALID
    try:
        run_dir = find_run_dir(args.job, args.run_dir)
    except (ConfigError, OSError) as e:
        print(f"lamplighter revive: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    if api is None:
        from lamplighter.commands.job import api_for

        try:
            api = api_for(load(run_dir).slurm_conf)
        except (FileNotFoundError, ValueError) as e:
            print(f"lamplighter revive: error: {e}", file=sys.stderr)
            return EXIT_INVALID
    try:
        out = revive(
            run_dir,
            args.group,
            api,
            uid=os.geteuid(),
            now=time.time(),
            note=args.reason,
            dry_run=args.dry_run,
        )
    except Refused as e:
        print(f"lamplighter revive: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except (SlurmError, Failed) as e:
        print(f"lamplighter revive: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    p = out.plan
    if args.dry_run:
        how = "release it (scontrol release)" if p.how == "release" else "submit its script afresh"
        print(f"would revive group {args.group} (Slurm job {out.old_job_id}): {how}; it is down: {p.why_down}")
        return 0
    if p.how == "release":
        print(f"revived group {args.group}: released Slurm job {out.old_job_id} (it was down: {p.why_down})")
    else:
        print(
            f"revived group {args.group}: new Slurm job {out.new_job_id} in place of {out.old_job_id} "
            f"(it was down: {p.why_down}); its restart budget starts again at 0"
        )
    print(f"recorded in {run_dir / ACTIONS}: lamplighter why {args.job}")
    return 0
