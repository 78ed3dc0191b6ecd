"""Group jobs that ended FAILED with nobody to requeue them: the head requeues them under the job's own policy.

A group's node daemon requeues its job when it sees the trainer fail. A trainer
that dies before that daemon first saw it (the soak: a kill 0.2 s into a new
attempt), or while that daemon is down, ends the batch script with its status:
Slurm records the job FAILED and the job trains on with one group fewer. Slurm
keeps a finished job for MinJobAge (300 s by default) and `scontrol requeue`
brings a FAILED batch job back within it (measured on 22.05), so the head,
which lists the jobs of its prefix anyway, does it when no node daemon has
within FAILED_GRACE_S (head/loop.py): the node daemon, when it saw the trainer,
requeues under the job's whole policy (backoff, crash loop) and goes first.

It judges the failed attempt as a node daemon would (policy.judge_failure),
with what the job's run directory says, reading there only small regular
files of the job's owner (Slurm's UserId; rundir/owned_file.py: job.json at
most 1 MiB, the tail of actions.jsonl): never for an exit status in the job's
`restart.no_restart_exit_codes`, nor when the job is complete
(`<run_dir>/completed`) or a daemon gave that attempt up (its give_up line in
`<run_dir>/actions.jsonl`), nor past `restart.budget_per_group` (renewals do
not count). The crash-loop window is the node daemons' own: the head sees only
failures that nobody handled. Each failed attempt is judged once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from lamplighter.configs.job_file import parse_job_file
from lamplighter.configs.loader import ConfigError, Problem
from lamplighter.configs.schema import RestartConfig
from lamplighter.policy.restart import judge_failure
from lamplighter.rundir.actions import ACTIONS_FILE
from lamplighter.rundir.contract import SMALL_FILE_BYTES, RunPaths
from lamplighter.rundir.owned_file import MIB, OwnedFileError, read_owned, read_owned_tail
from lamplighter.slurm.injob.renew import RENEWAL_DIR, renewals_file
from lamplighter.slurm.parsers import JobInfo
from lamplighter.slurm.submit.render import CONFIG_FILE
from lamplighter.slurm.submit.submission import SCRIPTS_DIR

ACTIONS_TAIL_BYTES = 4 * MIB  # a job's give_up line is among its last actions

_GROUP_NAME = re.compile(r"-g(\d+)$")


@dataclass(frozen=True)
class FailedAttempt:
    """A group job's failed attempt as Slurm reports it, and what its run directory says of it."""

    job_id: int
    group: int
    attempt: int  # Slurm's restart count: the attempt that failed
    status: int | None  # the batch script's exit status
    node: str | None  # where it failed (kept off it on the next start)
    restart: RestartConfig
    renewals: int = 0
    completed: bool = False
    given_up: bool = False


@dataclass(frozen=True)
class RequeueVerdict:
    requeue: bool
    reason: str
    delay_s: float = 0.0


def judge(now: float, f: FailedAttempt) -> RequeueVerdict:
    """Pure: requeue the failed attempt, or leave it FAILED; and why."""
    what = f"Slurm job {f.job_id} (group {f.group}) ended FAILED with status {f.status} on {f.node}"
    if f.completed:
        return RequeueVerdict(False, f"{what}: the job already reached its target")
    if f.given_up:
        return RequeueVerdict(False, f"{what}: a node daemon gave this attempt up")
    if f.status is not None and f.status in f.restart.no_restart_exit_codes:
        return RequeueVerdict(
            False, f"{what}: status in restart.no_restart_exit_codes {f.restart.no_restart_exit_codes}"
        )
    restarts = max(0, f.attempt - f.renewals)
    verdict = judge_failure(now, (), restarts, f.restart)
    if verdict.give_up:
        return RequeueVerdict(False, f"GIVING UP on {what}: {verdict.give_up}")
    return RequeueVerdict(
        True,
        f"{what} and no daemon requeued it; restart {restarts + 1}/{f.restart.budget_per_group} "
        f"in {verdict.delay_s:.1f} s",
        verdict.delay_s,
    )


def group_of(name: str) -> int | None:
    m = _GROUP_NAME.search(name)
    return int(m.group(1)) if m else None


def run_dir_of(info: JobInfo) -> Path | None:
    """The run directory of a rendered group job: its script is `<run_dir>/sbatch/group-N.sbatch`."""
    command = info.fields.get("Command")
    if not command:
        return None
    script = Path(command)
    if script.parent.name != SCRIPTS_DIR:
        return None
    run_dir = script.parent.parent
    return run_dir if (run_dir / CONFIG_FILE).is_file() else None


def exit_status(info: JobInfo) -> int | None:
    """`ExitCode=137:0` -> 137 (the script's status; the part after the colon is a signal)."""
    head = (info.exit_code or "").split(":", 1)[0]
    return int(head) if head.isdigit() else None


def read_attempt(info: JobInfo, group: int, run_dir: Path) -> FailedAttempt:
    """Raises ConfigError when the job's config cannot be used (the caller logs it and tries later)."""
    owner = info.user_id
    path = run_dir / CONFIG_FILE
    if owner is None:
        raise ConfigError([Problem(str(path), None, "", f"Slurm names no owner of job {info.job_id}")])
    try:
        text = read_owned(path, owner=owner, max_bytes=MIB).decode("utf-8", errors="replace")
    except OwnedFileError as e:
        raise ConfigError([Problem(str(path), None, "", e.why)]) from None
    job = parse_job_file(text, str(path))
    renewals = renewals_file(run_dir / RENEWAL_DIR, group, info.job_id)
    try:
        n_renewals = int(read_owned(renewals, owner=owner, max_bytes=SMALL_FILE_BYTES).decode().strip() or 0)
    except (OwnedFileError, ValueError):
        n_renewals = 0
    return FailedAttempt(
        job_id=info.job_id,
        group=group,
        attempt=info.restarts,
        status=exit_status(info),
        node=info.batch_host,
        restart=job.restart,
        renewals=n_renewals,
        completed=owned_marker(RunPaths(run_dir).completed(), owner),
        given_up=gave_up(run_dir / ACTIONS_FILE, info.job_id, info.restarts, owner),
    )


def owned_marker(path: Path, owner: int) -> bool:
    """A marker file there, and its owner's (someone else's `completed` says nothing about the job)."""
    try:
        read_owned(path, owner=owner, max_bytes=64 * 1024)
    except OwnedFileError:
        return False
    return True


def gave_up(actions: Path, job_id: int, attempt: int, owner: int | None = None) -> bool:
    """A daemon's give_up line about this attempt among the last lines of the job's actions.jsonl (its owner's)."""
    try:
        data, whole = read_owned_tail(actions, owner=owner, max_bytes=ACTIONS_TAIL_BYTES)
    except OwnedFileError:
        return False
    lines = data.decode(errors="replace").splitlines()[0 if whole else 1 :]
    for line in lines:
        if '"give_up"' not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        jobs = rec.get("jobs") or []
        if rec.get("action") == "give_up" and any(
            str(j.get("job_id")) == str(job_id) and j.get("attempt") in (attempt, None) for j in jobs
        ):
            return True
    return False
