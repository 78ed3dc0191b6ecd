"""`lamplighter submit`: render a job's sbatch scripts and submit them, and the record that remembers it.

Order: the job's own Lighthouse job first, then one requeueable job per
replica group, each with `--dependency=after:<Lighthouse job>`: Slurm starts
no group before the Lighthouse job has started, and submit returns once the
jobs are queued, however busy the queue (the groups' in-job agents wait for
the address the Lighthouse publishes). `submit --wait` waits until the
Lighthouse answers, a line per change; a Lighthouse that cannot start (its
log shows it exiting: an import error) fails there, and `status` names it
too. Each job has its own Lighthouse: two jobs never share a quorum,
whatever their replicas are named.

The job ends cleanly through Slurm itself: the Lighthouse job's script waits
(slurm/submit/release.py) until every group job named in this record has left the
queue, then stops the Lighthouse and exits. No watcher process outside Slurm
has to survive for this to work.

Why not submitit: it pickles a Python function per job and runs it through its
own generated script, so the scripts could not be read or used by hand, and its
requeue-on-preemption model (checkpoint + resubmit) is not torchft's (a group
comes back and heals from a live peer). Submission here is `sbatch
--parsable` calls through `SlurmApi`, which the fake implements for unit tests.
"""

from __future__ import annotations

import getpass
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lamplighter.configs.schema import JobConfig, container_path_problems
from lamplighter.configs.slurm_names import job_name_prefix
from lamplighter.lighthouse.status import LighthouseStatusError, fetch_status
from lamplighter.rundir import contract
from lamplighter.slurm.actions import ENDED_STATES, SlurmApi
from lamplighter.slurm.parsers import JobInfo
from lamplighter.slurm.run import SlurmError
from lamplighter.slurm.submit.lighthouse_log import lighthouse_log_problem
from lamplighter.slurm.submit.lighthouse_time import asks_slurm, lighthouse_time, with_lighthouse_time
from lamplighter.slurm.submit.render import render_job, resolve_paths

SUBMISSION_FILE = "submission.json"
GONE = "GONE"  # purged by Slurm (MinJobAge): long over
UNKNOWN = "UNKNOWN"  # Slurm did not answer
INCOMPLETE = "incomplete"  # in Submission.extra while a submission is unfinished or its rollback failed
SCRIPTS_DIR = "sbatch"


class SubmitError(RuntimeError):
    """Submission failed; whatever had been submitted was cancelled, or the message names what was not."""


def slurm_forgot(e: SlurmError) -> bool:
    """The job is unknown to Slurm (ended longer ago than MinJobAge), as opposed to Slurm not answering."""
    return "invalid job id" in e.stderr.lower()


@dataclass
class Submission:
    """What `submit` started: everything status/cancel/chaos need, in `<run_dir>/submission.json`."""

    job: str
    config: str
    run_dir: str
    slurm_conf: str | None
    lighthouse_address: str
    lighthouse_job_id: int | None  # the job's own Lighthouse job (None only in records from before 0.2)
    groups: dict[int, int]  # replica id -> Slurm job id
    scripts: list[str]
    submitted_at: float
    target_steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def address(self) -> str:
        """Where this job's Lighthouse answers: the address its job published, else the one recorded."""
        if self.lighthouse_job_id is not None:
            published = published_by(Path(self.run_dir), self.lighthouse_job_id)
            if published:
                return published
        return self.lighthouse_address

    @property
    def lighthouse(self) -> str:
        return "none" if self.lighthouse_job_id is None else str(self.lighthouse_job_id)

    def all_job_ids(self) -> list[int]:
        """Groups first, then the Lighthouse: the order cancel stops them in."""
        ids = [self.groups[g] for g in sorted(self.groups)]
        ids += [] if self.lighthouse_job_id is None else [self.lighthouse_job_id]
        return ids

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["groups"] = {str(k): v for k, v in self.groups.items()}
        d["lighthouse"] = self.lighthouse
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Submission:
        d = dict(d)
        d.pop("lighthouse", None)
        d.pop("release_job_id", None)  # records from before the Lighthouse job ended itself
        d["groups"] = {int(k): int(v) for k, v in d["groups"].items()}
        return cls(**d)


def save(sub: Submission) -> Path:
    path = Path(sub.run_dir) / SUBMISSION_FILE
    contract.write_json_atomic(path, sub.to_json())
    return path


def load(run_dir: Path) -> Submission:
    path = run_dir / SUBMISSION_FILE
    try:
        return Submission.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no submission record at {path}: was the job submitted with `lamplighter submit`?"
        ) from None
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"submission record {path} is damaged: {e}") from e


class JobNotFound(FileNotFoundError):
    """No run directory for a job name; the message names every place looked in."""


def find_run_dir(job: str, run_dir: str | None = None, base: Path | None = None) -> Path:
    """JOB as given to status/cancel/chaos/why: a run dir, a config file, or a job name (slurm/submit/job_index.py:
    the user's index of submitted jobs, $LAMPLIGHTER_RUNS, ./runs/<name>); raises JobNotFound for a name
    found nowhere."""
    from lamplighter.slurm.submit.job_index import find_by_name

    base = base or Path.cwd()
    if run_dir:
        return Path(run_dir).resolve()
    p = Path(job)
    if p.is_dir() and (p / SUBMISSION_FILE).exists():
        return p.resolve()
    if p.is_file() and p.suffix in (".yaml", ".yml", ".json"):
        from lamplighter.configs.loader import load_job

        return resolve_paths(load_job(p), base).run_dir
    if p.is_dir():
        return p.resolve()  # a run directory with no submission yet (why reads its actions all the same)
    found = find_by_name(job, base)
    if found.found is None:
        raise JobNotFound(
            f"no job {job!r} found: looked in {found.where()}; give its run directory (--run-dir) or its config file"
        )
    return found.found


def published_by(run_dir: Path, job_id: int) -> str | None:
    """The address the Lighthouse of Slurm job `job_id` published, or None (not yet, or another job's record)."""
    try:
        rec = json.loads(contract.RunPaths(run_dir).lighthouse().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or str(rec.get("slurm_job_id")) != str(job_id):
        return None
    return contract.read_lighthouse_address(run_dir)


def wait_lighthouse(
    api: SlurmApi,
    job_id: int,
    run_dir: Path,
    timeout: float,
    probe: Callable[[str], object] = fetch_status,
    read_address: Callable[[Path, int], str | None] = published_by,
    say: Callable[[str], None] = lambda line: None,
) -> tuple[str, float]:
    """Wait until the Lighthouse job runs, has published its address and answers there; return both.

    However long it stays PENDING (a busy queue is no failure); once it RUNS it has `timeout` seconds to
    answer, and a Lighthouse its log shows exiting (an import error) fails at once, naming the error.
    `say` gets one line per change of what it waits for."""
    t0 = time.monotonic()
    running_since: float | None = None
    said = ""
    while True:
        info = api.job(job_id)
        if info.state in ENDED_STATES:
            raise SubmitError(f"Lighthouse job {job_id} ended ({info.state}, exit {info.exit_code}) before answering")
        now = ""
        if info.state != "RUNNING":
            running_since = None
            now = f"Lighthouse job {job_id}: {info.state}" + (f" ({info.reason})" if info.reason else "")
        else:
            running_since = running_since or time.monotonic()
            address = read_address(run_dir, job_id)
            if address is None:
                problem = lighthouse_log_problem(run_dir, job_id)
                if problem is not None:
                    raise SubmitError(f"Lighthouse job {job_id} runs on {info.node_list}, but {problem}")
                now = f"Lighthouse job {job_id}: RUNNING on {info.node_list}; waiting for its address"
            else:
                try:
                    probe(address)
                    say(f"Lighthouse job {job_id}: answers at {address}")
                    return address, time.monotonic() - t0
                except (LighthouseStatusError, OSError) as e:
                    now = f"Lighthouse job {job_id}: published {address}, which does not answer yet ({e})"
            if time.monotonic() - running_since > timeout:
                raise SubmitError(f"the Lighthouse was not up {timeout:.0f} s after its job started: {now}")
        if now != said:
            say(now)
            said = now
        time.sleep(0.2)


def _lighthouse_time(job: JobConfig, api: SlurmApi, say: Callable[[str], None]) -> JobConfig:
    """The job with its Lighthouse's limit at the partition's MaxTime where that spares it a renewal."""
    if not asks_slurm(job):
        return job
    try:
        choice = lighthouse_time(job, api.partitions())
    except SlurmError as e:
        say(f"Lighthouse job's time limit: slurm.time (partitions unread: {e})")
        return job
    say(f"Lighthouse job's time limit: {choice.time or job.slurm.lighthouse_limit} ({choice.why})")
    return job if choice.time is None else with_lighthouse_time(job, choice.time)


def submit_job(
    job: JobConfig,
    api: SlurmApi,
    *,
    config_path: str,
    base: Path | None = None,
    python: str | None = None,
    wait: bool = False,
    lighthouse_timeout: float = 60.0,
    probe: Callable[[str], object] = fetch_status,
    read_address: Callable[[Path, int], str | None] = published_by,
    now: Callable[[], float] = time.time,
    rollback_timeout: float = 30.0,
    say: Callable[[str], None] = lambda line: None,
) -> Submission:
    """Render and submit everything; on any failure cancel what was submitted and raise SubmitError.

    The Lighthouse job first, then each group with `--dependency=after:<Lighthouse job>`, so that Slurm
    starts no group before the Lighthouse job has started, and submit returns once all are queued
    (the groups' in-job agents wait for the address it publishes). With `wait`, it then waits until the
    Lighthouse answers (wait_lighthouse: as long as it is queued, `lighthouse_timeout` once it runs).
    When Slurm stops answering part-way, the rollback keeps trying for `rollback_timeout` seconds;
    jobs it still could not cancel stay in the submission record (marked incomplete) and the error
    names them, so `lamplighter cancel` finishes the rollback: nothing is left half-submitted unknown.
    """
    paths = resolve_paths(job, base)
    prev = paths.run_dir / SUBMISSION_FILE
    if prev.exists():
        old = load(paths.run_dir)
        live = [j for j in old.all_job_ids() if _still_queued(api, j)]
        if live:
            raise SubmitError(
                f"job {job.name} is already submitted (Slurm jobs {live} in {prev}); "
                f"`lamplighter cancel {job.name}` first"
            )
    unseen = container_path_problems(job, str(paths.run_dir), on_host=os.path.isdir)
    if unseen:
        # Before anything is written or queued: every rank would fail on its first import (`lamplighter validate`).
        raise SubmitError(f"job {job.name}: " + "; ".join(f"{key}: {problem}" for key, problem in unseen))
    job = _lighthouse_time(job, api, say)
    out_dir = paths.run_dir / SCRIPTS_DIR
    scripts = render_job(job, out_dir, python=python, base=base, run_files=True)
    by_name = {p.name: p for p in scripts}
    slurm_conf = job.slurm.slurm_conf
    # A previous run's address must never be mistaken for this job's Lighthouse, nor its end for this one's.
    contract.RunPaths(paths.run_dir).lighthouse().unlink(missing_ok=True)
    contract.RunPaths(paths.run_dir).completed().unlink(missing_ok=True)
    contract.RunPaths(paths.run_dir).lighthouse_memory().unlink(missing_ok=True)  # another job's replicas
    # The record is written as each job is submitted (marked incomplete until the end), so whatever
    # happens next, `lamplighter cancel` can find every job this submission started.
    sub = Submission(
        job=job.name,
        config=str(Path(config_path).resolve()),
        run_dir=str(paths.run_dir),
        slurm_conf=slurm_conf,
        lighthouse_address="",  # known once this job's Lighthouse has published it (Submission.address)
        lighthouse_job_id=None,
        groups={},
        scripts=[str(p) for p in scripts],
        submitted_at=now(),
        target_steps=job.trainer.steps,
        extra={INCOMPLETE: "submission in progress"},
    )
    try:
        lh_id = api.submit(by_name["lighthouse.sbatch"])
        sub.lighthouse_job_id = lh_id
        save(sub)
        say(f"Lighthouse job {lh_id} submitted")
        for rid in range(job.groups.count):
            sub.groups[rid] = api.submit(by_name[f"group-{rid}.sbatch"], after=lh_id)
            save(sub)
        say(f"group jobs {', '.join(str(sub.groups[g]) for g in sorted(sub.groups))} submitted (after:{lh_id})")
        if wait:
            sub.lighthouse_address, _ = wait_lighthouse(
                api, lh_id, paths.run_dir, lighthouse_timeout, probe, read_address, say
            )
    except BaseException as e:
        left = roll_back(sub, api, rollback_timeout)
        cancelled = [j for j in sub.all_job_ids() if j not in left]
        if left:
            sub.extra[INCOMPLETE] = (
                f"submit failed ({e}); could not cancel Slurm jobs {left}: run `lamplighter cancel {job.name}`"
            )
            save(sub)
        else:
            (paths.run_dir / SUBMISSION_FILE).unlink(missing_ok=True)
        if isinstance(e, (SubmitError, SlurmError, TimeoutError)):
            what = f"cancelled {cancelled or 'nothing'}"
            if left:
                what += (
                    f"; COULD NOT CANCEL Slurm jobs {left} (Slurm did not answer): they are recorded in "
                    f"{paths.run_dir / SUBMISSION_FILE}; run `lamplighter cancel {job.name}` once Slurm answers"
                )
            raise SubmitError(f"submitting job {job.name} failed ({what}): {e}") from e
        raise
    del sub.extra[INCOMPLETE]
    save(sub)
    return sub


def roll_back(sub: Submission, api: SlurmApi, timeout: float, interval: float = 0.5) -> list[int]:
    """Cancel every job of a failed submission; return those that could not be cancelled within `timeout`.

    Also sweeps the queue for this user's jobs with the job's names: an sbatch that timed out may
    have been accepted all the same, and no earlier submission of this job is live (submit_job checked).
    """
    todo = list(reversed(sub.all_job_ids()))
    swept = False
    deadline = time.monotonic() + timeout
    while True:
        if not swept:
            try:
                me = getpass.getuser()
                extra = [e.job_id for e in api.jobs(job_name_prefix(sub.job)) if e.user == me]
                todo += [j for j in extra if j not in todo]
                swept = True
            except SlurmError:
                pass
        left = []
        for jid in todo:
            try:
                api.cancel(jid)
            except SlurmError as e:
                if not slurm_forgot(e):
                    left.append(jid)
        todo = left
        if not todo or time.monotonic() > deadline:
            return todo
        time.sleep(interval)


def has_ended(state: str) -> bool:
    """A state from job_states that will not run again (UNKNOWN is not: Slurm did not say)."""
    return state in ENDED_STATES or state == GONE


def job_states(api: SlurmApi, job_ids: Iterable[int]) -> dict[int, str]:
    """Slurm's state of each job, in one squeue however many, or GONE (purged: long over) or UNKNOWN (Slurm
    did not answer). One call, not one per job: the Lighthouse job's release helper asks every 5 s, and one
    `scontrol show job` per group cost slurmctld 0.4 RPCs a second per group (make scale, 25 at 64 groups)."""
    ids = list(dict.fromkeys(job_ids))
    if not ids:
        return {}
    try:
        known = api.jobs_by_id(ids)
    except SlurmError as e:
        # squeue fails only when it knows none of them (22.05): all purged, or no answer.
        return dict.fromkeys(ids, GONE if slurm_forgot(e) else UNKNOWN)
    return {j: known[j].state if j in known else GONE for j in ids}


def _still_queued(api: SlurmApi, job_id: int) -> bool:
    try:
        return api.job(job_id).state not in ENDED_STATES
    except SlurmError as e:
        if slurm_forgot(e):
            return False  # MinJobAge passed
        raise SubmitError(f"cannot tell whether Slurm job {job_id} of the earlier submission still runs: {e}") from e


@dataclass(frozen=True)
class Cancelled:
    job_id: int
    what: str
    state_before: str


@dataclass(frozen=True)
class NotCancelled:
    job_id: int
    what: str
    error: str


@dataclass
class CancelResult:
    cancelled: list[Cancelled] = field(default_factory=list)
    failed: list[NotCancelled] = field(default_factory=list)


def job_roles(sub: Submission) -> dict[int, str]:
    names = {sub.groups[g]: f"group {g}" for g in sub.groups}
    if sub.lighthouse_job_id is not None:
        names[sub.lighthouse_job_id] = "lighthouse"
    return names


def cancel_job(sub: Submission, api: SlurmApi) -> CancelResult:
    """Cancel the groups, then the release job, then the Lighthouse.

    Returns what was still live and is cancelled now, and what could not be cancelled (Slurm did
    not answer, or refused): a job Slurm has forgotten or that has ended needs nothing.
    """
    names = job_roles(sub)
    out = CancelResult()
    for jid in sub.all_job_ids():
        try:
            info: JobInfo = api.job(jid)
        except SlurmError as e:
            if not slurm_forgot(e):
                out.failed.append(NotCancelled(jid, names[jid], str(e)))
            continue
        if info.state in ENDED_STATES:
            continue
        try:
            api.cancel(jid)
        except SlurmError as e:
            if not _ended_meanwhile(api, jid):
                out.failed.append(NotCancelled(jid, names[jid], str(e)))
            continue
        out.cancelled.append(Cancelled(jid, names[jid], info.state))
    return out


def _ended_meanwhile(api: SlurmApi, job_id: int) -> bool:
    try:
        return api.job(job_id).state in ENDED_STATES
    except SlurmError as e:
        return slurm_forgot(e)


def wait_ended(sub: Submission, api: SlurmApi, timeout: float) -> dict[int, str]:
    """Wait (bounded) until every job of the submission has ended; return their states."""
    deadline = time.monotonic() + timeout
    while True:
        states = job_states(api, sub.all_job_ids())
        if all(map(has_ended, states.values())):
            return states
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {sub.job}: not all Slurm jobs ended after {timeout:.0f} s: {states}")
        time.sleep(0.2)
