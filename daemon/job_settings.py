"""Each job's own settings, read from the config it was submitted with.

A job's health thresholds, restart policy and Lighthouse travel with the job:
render/submit writes the validated config to `<run_dir>/job.json`, and every
trainer carries its path in LAMPLIGHTER_CONFIG. The node daemon loads it with
the schema once per Slurm job id and applies it to that job's groups; node.yaml
holds only the node's own settings.

A config that cannot be read or is invalid is logged once as an error naming
the file, and the job gets the defaults (it is still watched: a trainer is
never left unsupervised for a bad file). An unreadable file is tried again
after `RETRY_S` (a shared file system that hiccupped), a good one never.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lamplighter.configs.loader import ConfigError, load_job
from lamplighter.configs.schema import HealthConfig, JobConfig, RestartConfig
from lamplighter.slurm.render import lighthouse_url
from lamplighter.trainer.contract import ENV_CONFIG

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


def settings_of(job: JobConfig, source: str) -> JobSettings:
    return JobSettings(
        health=job.health,
        restart=job.restart,
        lighthouse=lighthouse_url(job) if job.lighthouse.port != 0 else None,
        run_dir=job.run_dir,
        target_step=job.trainer.steps,
        source=source,
    )


def read_job_settings(path: str | None) -> JobSettings:
    """The settings in a job's config file, or the defaults with the reason."""
    if path is None:
        return JobSettings(error=f"its trainers carry no {ENV_CONFIG}")
    try:
        return settings_of(load_job(path), path)
    except ConfigError as e:
        return JobSettings(source=path, error="; ".join(str(p) for p in e.problems))


class JobSettingsCache:
    """Settings per Slurm job id, read on first sight; errors logged once, naming the file."""

    def __init__(self, read: Callable[[str | None], JobSettings] = read_job_settings) -> None:
        self._read = read
        self._by_job: dict[str, tuple[JobSettings, float]] = {}  # job id -> (settings, when read)

    def get(self, job_id: str, path: str | None, now: float) -> JobSettings:
        have = self._by_job.get(job_id)
        if have is not None and (have[0].error is None or now - have[1] < RETRY_S):
            return have[0]
        settings = self._read(path)
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

    def keep(self, job_ids: Iterable[str]) -> None:
        """Forget jobs no longer of interest (gone from this node, nothing pending about them)."""
        wanted = set(job_ids)
        for j in [j for j in self._by_job if j not in wanted]:
            del self._by_job[j]
