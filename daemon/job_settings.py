"""Each job's own settings, read from the config it was submitted with.

A job's health thresholds, restart policy and Lighthouse travel with the job:
render/submit writes the validated config to `<run_dir>/job.json`, and every
trainer carries its path in LAMPLIGHTER_CONFIG. The node daemon loads it with
the schema once per (Slurm job id, owner) of a verified process
(job_identity.py: the job's own word about itself, which can only steer that
job) and applies it to that job's groups; node.yaml holds only the node's own
settings. The file is read only as a regular file of the job's owner, at most
1 MiB (trainer/owned_file.py): a link, a FIFO, /dev/zero or another user's
file gets the defaults and the reason, and no value of it is echoed.

A config that cannot be read or is invalid is logged once as an error naming
the file, and the job gets the defaults (it is still watched: a trainer is
never left unsupervised for a bad file). An unreadable file is tried again
after `RETRY_S` (a shared file system that hiccupped), a good one never.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lamplighter.configs.loader import ConfigError, parse
from lamplighter.configs.schema import HealthConfig, JobConfig, RestartConfig
from lamplighter.slurm.render import lighthouse_url
from lamplighter.trainer.contract import ENV_CONFIG
from lamplighter.trainer.owned_file import MIB, OwnedFileError, read_owned

log = logging.getLogger(__name__)

RETRY_S = 60.0


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


def settings_of(job: JobConfig, source: str, owner: int | None = None) -> JobSettings:
    return JobSettings(
        owner=owner,
        health=job.health,
        restart=job.restart,
        lighthouse=lighthouse_url(job) if job.lighthouse.port != 0 else None,
        run_dir=job.run_dir,
        target_step=job.trainer.steps,
        source=source,
    )


CONFIG_MAX_BYTES = MIB


def read_job_settings(path: str | None, owner: int) -> JobSettings:
    """The settings in a job's config file, a regular file of `owner`, or the defaults with the reason."""
    if path is None:
        return JobSettings(error=f"its trainers carry no {ENV_CONFIG}", owner=owner)
    try:
        raw = read_owned(path, owner=owner, max_bytes=CONFIG_MAX_BYTES)
        return settings_of(parse(JobConfig, raw.decode("utf-8", errors="replace"), path), path, owner)
    except OwnedFileError as e:
        return JobSettings(source=path, error=e.why, owner=owner)
    except ConfigError as e:
        # Where and which key, not the values: a file the daemon was pointed at is not echoed.
        where = "; ".join(f"line {p.line}: {p.key or '(file)'}" for p in e.problems[:5])
        return JobSettings(source=path, error=f"not a valid job config ({where})", owner=owner)


class JobSettingsCache:
    """Settings per (Slurm job id, owner), read on first sight; errors logged once, naming the file."""

    def __init__(self, read: Callable[[str | None, int], JobSettings] = read_job_settings) -> None:
        self._read = read
        self._by_job: dict[str, tuple[JobSettings, float]] = {}  # job id -> (settings, when read)

    def get(self, job_id: str, owner: int, path: str | None, now: float) -> JobSettings:
        have = self._by_job.get(job_id)
        # Read again for another owner or another file: a task first read before its exec named no file.
        fresh = have is not None and (have[0].owner, have[0].source) == (owner, path)
        if have is not None and fresh and (have[0].error is None or now - have[1] < RETRY_S):
            return have[0]
        settings = self._read(path, owner)
        if settings.error is None:
            log.info("Slurm job %s: applying the health and restart settings of %s", job_id, settings.source)
        elif have is None or have[0].error != settings.error:
            log.error(
                "Slurm job %s: cannot use its config %s: %s; applying the default health and restart settings",
                job_id,
                settings.source or "(none)",
                settings.error,
            )
        self._by_job[job_id] = (settings, now)
        return settings

    def known(self) -> dict[str, JobSettings]:
        return {j: s for j, (s, _) in self._by_job.items()}

    def owner(self, job_id: str) -> int | None:
        have = self._by_job.get(job_id)
        return None if have is None else have[0].owner

    def keep(self, job_ids: Iterable[str]) -> None:
        """Forget jobs no longer of interest (gone from this node, nothing pending about them)."""
        wanted = set(job_ids)
        for j in [j for j in self._by_job if j not in wanted]:
            del self._by_job[j]
