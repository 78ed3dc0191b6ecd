"""`lamplighter submit`: render a job's sbatch scripts and submit them, and the record that remembers it.

Order: the Lighthouse job first, then one requeueable job per replica group,
then a tiny release job. submit waits (bounded) until the Lighthouse job runs
and answers on HTTP before submitting any group, so a broken Lighthouse fails
here, loudly, instead of as N trainers timing out at connect.

The job ends cleanly through Slurm itself: the release job
(`ll-<job>-release`) depends `afterany` on every group's job, and its body
waits until none of them is queued any more (squeue lists none: a requeued
group is PENDING again) before it runs `scancel <lighthouse job>`. The wait
covers a race `afterok` would lose: a group's job ends FAILED for a moment
before its node daemon requeues it, which makes an `afterok` dependency
impossible (and Slurm clears a satisfied `afterany` element for good). No
watcher process outside Slurm has to survive for this to work.

Why not submitit: it pickles a Python function per job and runs it through its
own generated script, so the scripts could not be read or used by hand, and its
requeue-on-preemption model (checkpoint + resubmit) is not torchft's (a group
comes back and heals from a live peer). Submission here is three `sbatch
--parsable` calls through `SlurmApi`, which the fake implements for unit tests.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lamplighter.configs.schema import JobConfig
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.parsers import JobInfo
from lamplighter.slurm.render import lighthouse_url, render_job, resolve_paths, sbatch_value, slurm_path_pattern
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.lighthouse_status import LighthouseStatusError, fetch_status
from lamplighter.trainer import contract

SUBMISSION_FILE = "submission.json"
SCRIPTS_DIR = "sbatch"
HEAD_SERVICE = "head-service"
# Slurm states after which a job never runs again (unless someone requeues it).
ENDED_STATES = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
)


class SubmitError(RuntimeError):
    """Submission failed; whatever had been submitted was cancelled."""


@dataclass
class Submission:
    """What `submit` started: everything status/cancel/chaos need, in `<run_dir>/submission.json`."""

    job: str
    config: str
    run_dir: str
    slurm_conf: str | None
    lighthouse_address: str
    lighthouse_job_id: int | None  # None: the head node's service runs it
    groups: dict[int, int]  # replica id -> Slurm job id
    release_job_id: int | None
    scripts: list[str]
    submitted_at: float
    target_steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def lighthouse(self) -> str:
        return HEAD_SERVICE if self.lighthouse_job_id is None else str(self.lighthouse_job_id)

    def all_job_ids(self) -> list[int]:
        """Groups first, then the release job, then the Lighthouse: the order cancel stops them in."""
        ids = [self.groups[g] for g in sorted(self.groups)]
        ids += [j for j in (self.release_job_id, self.lighthouse_job_id) if j is not None]
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


def find_run_dir(job: str, run_dir: str | None = None, base: Path | None = None) -> Path:
    """JOB as given to status/cancel/chaos: a run dir, a config file, or a job name under runs/<name>."""
    base = base or Path.cwd()
    if run_dir:
        return Path(run_dir).resolve()
    p = Path(job)
    if p.is_dir() and (p / SUBMISSION_FILE).exists():
        return p.resolve()
    if p.is_file() and p.suffix in (".yaml", ".yml", ".json"):
        from lamplighter.configs.loader import load_job

        return resolve_paths(load_job(p), base).run_dir
    return (base / "runs" / job).resolve()


def render_release_script(
    job: JobConfig, group_ids: list[int], lighthouse_job_id: int, logs: Path, slurm_conf: str | None
) -> str:
    """The release job: once no group job is queued or running any more, cancel the Lighthouse job."""
    deps = ":".join(str(j) for j in group_ids)
    ids = " ".join(str(j) for j in group_ids)
    lines = [
        "#!/bin/bash",
        f"# lamplighter job {job.name}: releases the Lighthouse job once every replica group has ended.",
        "# Slurm starts it when all group jobs ended (afterany); it then waits while any of them is",
        "# back in the queue (requeued by a node daemon) and cancels the Lighthouse when none is.",
        f"#SBATCH --job-name={sbatch_value(f'll-{job.name}-release', 'job name')}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        f"#SBATCH --dependency=afterany:{deps}",
        "#SBATCH --no-requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={sbatch_value(slurm_path_pattern(str(logs)) + '/release-%j.out', 'log path')}",
    ]
    if job.slurm.partition:
        lines.append(f"#SBATCH --partition={sbatch_value(job.slurm.partition, 'slurm.partition')}")
    lines += ["", "set -uo pipefail"]
    if slurm_conf:
        lines.append(f"export SLURM_CONF={shlex.quote(slurm_conf)}")
    lines += [
        "# Still queued (pending, running, completing)? A purged id is long over; any other squeue",
        "# error counts as still queued, so a slurmctld hiccup never releases the Lighthouse early.",
        "queued() {",
        "    local out",
        '    if out=$(squeue --noheader --jobs="$1" --states=PD,R,CG,CF,S,RQ,RH,RF,RS,SI,SO --format=%i 2>&1); then [ -n "$out" ]; return; fi',
        '    case "$out" in *"Invalid job id"*) return 1 ;; *) return 0 ;; esac',
        "}",
        "any_queued() {",
        f'    for j in {ids}; do queued "$j" && return 0; done',
        "    return 1",
        "}",
        "while any_queued; do sleep 5; done",
        f"exec scancel {lighthouse_job_id}",
        "",
    ]
    return "\n".join(lines)


def wait_lighthouse(
    api: SlurmApi, job_id: int | None, address: str, timeout: float, probe: Callable[[str], object] = fetch_status
) -> float:
    """Wait until the Lighthouse job runs and its HTTP page answers; return the seconds it took."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    last = "not checked yet"
    while True:
        if job_id is not None:
            info = api.job(job_id)
            if info.state in ENDED_STATES:
                raise SubmitError(
                    f"Lighthouse job {job_id} ended ({info.state}, exit {info.exit_code}) before answering"
                )
            running = info.state == "RUNNING"
            last = f"job {job_id} {info.state} (reason {info.reason})"
        else:
            running = True
        if running:
            try:
                probe(address)
                return time.monotonic() - t0
            except (LighthouseStatusError, OSError) as e:
                last = f"{address} does not answer: {e}"
        if time.monotonic() > deadline:
            raise SubmitError(f"the Lighthouse was not up after {timeout:.0f} s: {last}")
        time.sleep(0.2)


def submit_job(
    job: JobConfig,
    api: SlurmApi,
    *,
    config_path: str,
    base: Path | None = None,
    python: str | None = None,
    lighthouse_timeout: float = 60.0,
    probe: Callable[[str], object] = fetch_status,
    now: Callable[[], float] = time.time,
) -> Submission:
    """Render and submit everything; on any failure cancel what was submitted and raise SubmitError."""
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
    out_dir = paths.run_dir / SCRIPTS_DIR
    scripts = render_job(job, out_dir, python=python, base=base)
    by_name = {p.name: p for p in scripts}
    address = lighthouse_url(job)
    slurm_conf = job.slurm.slurm_conf
    submitted: list[int] = []
    try:
        lh_id: int | None = None
        if job.lighthouse.placement == "slurm-job":
            lh_id = api.submit(by_name["lighthouse.sbatch"])
            submitted.append(lh_id)
        wait_lighthouse(api, lh_id, address, lighthouse_timeout, probe)
        groups: dict[int, int] = {}
        for rid in range(job.groups.count):
            groups[rid] = api.submit(by_name[f"group-{rid}.sbatch"])
            submitted.append(groups[rid])
        release_id: int | None = None
        if lh_id is not None:
            rel = out_dir / "release.sbatch"
            rel.write_text(render_release_script(job, list(groups.values()), lh_id, paths.logs, slurm_conf))
            rel.chmod(0o755)
            scripts.append(rel)
            release_id = api.submit(rel)
            submitted.append(release_id)
    except BaseException as e:
        for jid in reversed(submitted):
            try:
                api.cancel(jid)
            except SlurmError:
                pass  # already gone
        if isinstance(e, (SubmitError, SlurmError, TimeoutError)):
            raise SubmitError(f"submitting job {job.name} failed (cancelled {submitted or 'nothing'}): {e}") from e
        raise
    sub = Submission(
        job=job.name,
        config=str(Path(config_path).resolve()),
        run_dir=str(paths.run_dir),
        slurm_conf=slurm_conf,
        lighthouse_address=address,
        lighthouse_job_id=lh_id,
        groups=groups,
        release_job_id=release_id,
        scripts=[str(p) for p in scripts],
        submitted_at=now(),
        target_steps=job.trainer.steps,
    )
    save(sub)
    return sub


def _still_queued(api: SlurmApi, job_id: int) -> bool:
    try:
        return api.job(job_id).state not in ENDED_STATES
    except SlurmError:
        return False  # Slurm forgot it (MinJobAge passed)


@dataclass(frozen=True)
class Cancelled:
    job_id: int
    what: str
    state_before: str


def cancel_job(sub: Submission, api: SlurmApi) -> list[Cancelled]:
    """Cancel the groups, then the release job, then the Lighthouse; return what was still live."""
    names = {sub.groups[g]: f"group {g}" for g in sub.groups}
    if sub.release_job_id is not None:
        names[sub.release_job_id] = "release"
    if sub.lighthouse_job_id is not None:
        names[sub.lighthouse_job_id] = "lighthouse"
    out: list[Cancelled] = []
    for jid in sub.all_job_ids():
        try:
            info: JobInfo = api.job(jid)
        except SlurmError:
            continue
        if info.state in ENDED_STATES:
            continue
        try:
            api.cancel(jid)
        except SlurmError:
            continue  # ended meanwhile
        out.append(Cancelled(jid, names[jid], info.state))
    return out


def wait_ended(sub: Submission, api: SlurmApi, timeout: float) -> dict[int, str]:
    """Wait (bounded) until every job of the submission has ended; return their states."""
    deadline = time.monotonic() + timeout
    while True:
        states: dict[int, str] = {}
        for jid in sub.all_job_ids():
            try:
                states[jid] = api.job(jid).state
            except SlurmError:
                states[jid] = "GONE"
        if all(s in ENDED_STATES or s == "GONE" for s in states.values()):
            return states
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {sub.job}: not all Slurm jobs ended after {timeout:.0f} s: {states}")
        time.sleep(0.2)
