"""Each job's own settings, read from the config it was submitted with.

A job's health thresholds, restart policy and Lighthouse travel with the job:
render/submit writes the validated config to `<run_dir>/job.json`, and every
trainer carries its path in LAMPLIGHTER_CONFIG. The node daemon loads it with
the schema once per (Slurm job id, owner) of a verified process
(identity.py: the job's own word about itself, which can only steer that
job) and applies it to that job's groups; node.yaml holds only the node's own
settings. The file is read only as a regular file of the job's owner, at most
1 MiB (rundir/owned_file.py): a link, a FIFO, /dev/zero or another user's
file gets the defaults and the reason, and no value of it is echoed.

job.json carries a format version (configs/job_file.py): a version this
daemon does not read is refused like an invalid file, with a reason saying
which version was found and which ones are read (a job submitted with a newer
lamplighter than the daemons'); so is a file with a key this daemon's schema
does not know.

A config that cannot be read, is invalid or of an unknown version is never
silent, and never leaves a trainer unsupervised: the job gets `fallback`
(pure, below), logged once as an error naming the file, said once in the
job's own `actions.jsonl` (loop.py: a `report` line, so `lamplighter
why` shows it; `settings_notice` is its text), in the node's health report
(`lamplighter status`) and as the metric lamplighter_job_settings_fallback.
The fallback: the default restart policy and D-state and memory limits, and
hangs *reported, never acted on*. The default hang (30 s) and start-up (300 s)
timeouts are not the job's: a large model's first load or a long checkpoint
save takes longer, and killing it for that would restart it in a loop until
its budget is spent, so a missed hang is the smaller harm (the job's own
watchdogs, torchft's timeouts, still end a real one). Exits and GPU faults do
not depend on the job's thresholds and are acted on as always. An unreadable
file is tried again after `RETRY_S` (a shared file system that hiccupped), a
good one never.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from lamplighter.configs.job_file import JobFileVersionError, parse_job_file
from lamplighter.configs.loader import ConfigError
from lamplighter.configs.schema import HealthConfig, JobConfig, RestartConfig
from lamplighter.rundir.contract import ENV_CONFIG
from lamplighter.rundir.owned_file import MIB, OwnedFileError, read_owned
from lamplighter.slurm.submit.render import lighthouse_url

log = logging.getLogger(__name__)

RETRY_S = 60.0
HangResponse = Literal["act", "report"]


@dataclass(frozen=True)
class JobSettings:
    health: HealthConfig = field(default_factory=HealthConfig)
    restart: RestartConfig = field(default_factory=RestartConfig)
    lighthouse: str | None = None  # the address its config fixes (port != 0): used until lighthouse.json exists
    run_dir: str | None = None
    target_step: int | None = None  # trainer.steps: a group past it is finishing, not hung
    source: str | None = None  # the config file
    error: str | None = None  # why the defaults are used
    owner: int | None = None  # the job's user, as Slurm and the kernel said
    hangs: HangResponse = "act"  # "report": a hang is said, never acted on (fallback: its own timeouts are unknown)
    retryable: bool = False  # the error is a read's (no file yet, say): read again after RETRY_S

    @property
    def fallback(self) -> bool:
        """Supervised with the fallback, not the job's own settings."""
        return self.error is not None


def settings_of(job: JobConfig, source: str, owner: int | None = None) -> JobSettings:
    return JobSettings(
        owner=owner,
        health=job.health,
        restart=job.restart,
        lighthouse=lighthouse_url(job),
        run_dir=job.run_dir,
        target_step=job.trainer.steps,
        source=source,
    )


CONFIG_MAX_BYTES = MIB


def fallback(error: str, source: str | None = None, owner: int | None = None, retryable: bool = False) -> JobSettings:
    """What a job whose config cannot be used is supervised with (pure; the module's docstring says why):
    the default restart policy, D-state and memory limits, and its hangs reported, never acted on."""
    return JobSettings(source=source, error=error, owner=owner, hangs="report", retryable=retryable)


def settings_notice(s: JobSettings) -> str:
    """The line a job whose settings were not applied gets in its actions.jsonl (and the node's log)."""
    h, r = HealthConfig(), RestartConfig()
    hangs = (
        f"hangs are reported, never acted on (the default hang {h.hang_timeout_s:g} s and start-up "
        f"{h.startup_timeout_s:g} s timeouts are not this job's)"
        if s.hangs == "report"
        else f"hang {s.health.hang_timeout_s:g} s, start-up {s.health.startup_timeout_s:g} s"
    )
    return (
        f"your settings were not applied: {s.source or '(no config)'}: {s.error}; supervised with the defaults: "
        f"{hangs}; exits, GPU, D-state ({h.d_state_max_s:g} s) and memory ({h.memory_max_percent:g}%) faults "
        f"acted on with the default restart policy (budget {r.budget_per_group} per group). Fix the file, or "
        "submit with the lamplighter version the node daemons run (lamplighter --version)"
    )


def applied_notice(s: JobSettings) -> str:
    """The line after a notice, once the job's config could be read after all."""
    h = s.health
    return f"your settings are applied now: {s.source}: hang {h.hang_timeout_s:g} s, start-up {h.startup_timeout_s:g} s"


def read_job_settings(path: str | None, owner: int) -> JobSettings:
    """The settings in a job's config file, a regular file of `owner`, or the fallback with the reason."""
    if path is None:
        return fallback(f"its trainers carry no {ENV_CONFIG}", owner=owner, retryable=True)
    try:
        raw = read_owned(path, owner=owner, max_bytes=CONFIG_MAX_BYTES)
        return settings_of(parse_job_file(raw.decode("utf-8", errors="replace"), path), path, owner)
    except OwnedFileError as e:
        return fallback(e.why, path, owner, retryable=True)
    except JobFileVersionError as e:
        return fallback(e.why, path, owner)
    except ConfigError as e:
        # Where and which key, not the values: a file the daemon was pointed at is not echoed.
        where = "; ".join(f"line {p.line}: {p.key or '(file)'}" for p in e.problems[:5])
        newer = (
            ": a key this lamplighter does not know (written by a newer one?)"
            if any(p.message.startswith("unknown key") for p in e.problems)
            else ""
        )
        return fallback(f"not a valid job config ({where}){newer}", path, owner)


class JobSettingsCache:
    """Settings per (Slurm job id, owner), read on first sight; errors logged once, naming the file."""

    def __init__(self, read: Callable[[str | None, int], JobSettings] = read_job_settings) -> None:
        self._read = read
        self._by_job: dict[str, tuple[JobSettings, float]] = {}  # job id -> (settings, when read)
        self._failed_reads: dict[str, int] = {}  # job id -> reads of its file in a row that failed (retryable)

    def get(self, job_id: str, owner: int, path: str | None, now: float) -> JobSettings:
        have = self._by_job.get(job_id)
        if have is not None and path is None and have[0].error is None and have[0].owner == owner:
            return have[0]  # a task not exec'd yet names no file: the config another task of the job named stands
        # Read again for another owner or another file: a task first read before its exec named no file.
        fresh = have is not None and (have[0].owner, have[0].source) == (owner, path)
        if have is not None and fresh and (have[0].error is None or now - have[1] < RETRY_S):
            return have[0]
        settings = self._read(path, owner)
        again = have is not None and fresh and have[0].error is not None
        self._failed_reads[job_id] = (
            (self._failed_reads.get(job_id, 0) + 1 if again else 1) if settings.retryable else 0
        )
        if settings.error is None:
            log.info("Slurm job %s: applying the health and restart settings of %s", job_id, settings.source)
        elif have is None or have[0].error != settings.error:
            log.error(
                "Slurm job %s: cannot use its config %s: %s; supervising it with the defaults, its hangs reported "
                "and not acted on",
                job_id,
                settings.source or "(none)",
                settings.error,
            )
        self._by_job[job_id] = (settings, now)
        return settings

    def known(self) -> dict[str, JobSettings]:
        return {j: s for j, (s, _) in self._by_job.items()}

    def settled(self, job_id: str) -> bool:
        """Whether the job's settings are news to tell its owner: its own, a file that cannot be used, or one
        that could not be read again after RETRY_S (one not there yet, on a shared file system that lags
        behind the job's start, is not news: it is on the fallback meanwhile, and said if the retry fails)."""
        have = self._by_job.get(job_id)
        return have is not None and (not have[0].retryable or self._failed_reads.get(job_id, 0) >= 2)

    def owner(self, job_id: str) -> int | None:
        have = self._by_job.get(job_id)
        return None if have is None else have[0].owner

    def keep(self, job_ids: Iterable[str]) -> None:
        """Forget jobs no longer of interest (gone from this node, nothing pending about them)."""
        wanted = set(job_ids)
        for j in [j for j in self._by_job if j not in wanted]:
            del self._by_job[j]
            self._failed_reads.pop(j, None)
