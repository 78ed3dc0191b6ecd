"""The job file, `<run_dir>/job.json`: a job's validated config as every reader of it takes it.

Written by `submit` (slurm/submit/render.py write_run_files), local mode, the bare-metal host (bare/host_daemon.py,
through its trainers' shell) and the benchmarks; read by the trainer (LAMPLIGHTER_CONFIG), the node daemon
(supervisor/node/job_settings.py, supervisor/head/failed_jobs.py), the in-job agent (slurm/injob/agent.py), and every command that
takes a config file (configs/loader.py load_job: `lamplighter validate runs/x/job.json`, `why runs/x/job.json`).

Format: one JSON object, the job's fields as `JobConfig.model_dump(mode="json")` gives them, and one key of
the file's own, FORMAT_KEY ("format_version"): FORMAT_VERSION, an integer.

    {"format_version": 1, "name": "llama3-8b", "health": {...}, ...}

A reader accepts the versions in KNOWN_VERSIONS, and a file without the key (written before versions
existed: version 1's fields). Any other version is refused with `JobFileVersionError` (a ConfigError),
which says which version was found and which ones this lamplighter reads: a file from a newer lamplighter
is never half applied by an older one. The version changes when the file's layout or the meaning of a
key changes; a new key does not change it (an older reader refuses the file as it refuses any unknown key,
just as loudly: the schema forbids unknown keys, configs/schema.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lamplighter.configs.loader import ConfigError, Loc, Problem, parse
from lamplighter.configs.schema import JobConfig

FORMAT_KEY = "format_version"
FORMAT_VERSION = 1
KNOWN_VERSIONS = frozenset({1})
UNVERSIONED = 0  # a file without FORMAT_KEY: written before versions existed, read as version 1


class JobFileVersionError(ConfigError, ValueError):
    """A job file of a format version this lamplighter does not read; `found` is it (None: not an integer).

    A ValueError too: readers that take a bad file as a ValueError (the trainer) need no new case."""

    def __init__(self, source: str, line: int | None, found: int | None) -> None:
        self.found = found
        super().__init__([Problem(source, line, FORMAT_KEY, version_problem(found))])

    @property
    def why(self) -> str:
        return version_problem(self.found)


def version_problem(found: int | None) -> str:
    """Why a version is refused, in one sentence (the value only when it is an integer: nothing else is echoed)."""
    known = ", ".join(str(v) for v in sorted(KNOWN_VERSIONS))
    what = f"format version {found}" if found is not None else "a format version that is not an integer"
    newer = " (written by a newer lamplighter?)" if found is not None and found > max(KNOWN_VERSIONS) else ""
    return f"job.json has {what}{newer}; this lamplighter reads format version {known}"


def job_file_doc(job: JobConfig) -> dict[str, Any]:
    """What job.json holds for `job`: its format version first, then its fields."""
    return {FORMAT_KEY: FORMAT_VERSION, **job.model_dump(mode="json")}


def job_file_json(job: JobConfig, indent: int | None = 2) -> str:
    """job.json's text for `job` (for writers that do not go through contract.write_json_atomic)."""
    return json.dumps(job_file_doc(job), indent=indent)


def take_version(doc: dict[str, Any], source: str = "<job.json>", line: int | None = None) -> int:
    """Remove FORMAT_KEY from `doc` and return its version (UNVERSIONED when absent); JobFileVersionError
    for a version this lamplighter does not read."""
    if FORMAT_KEY not in doc:
        return UNVERSIONED
    v = doc.pop(FORMAT_KEY)
    if isinstance(v, bool) or not isinstance(v, int):
        raise JobFileVersionError(source, line, None)
    if v not in KNOWN_VERSIONS:
        raise JobFileVersionError(source, line, v)
    return v


def version_header(source: str) -> Callable[[dict[str, Any], dict[Loc, int]], None]:
    """The loader's `header` for a job file: its version checked and taken out before the fields are."""

    def header(data: dict[str, Any], lines: dict[Loc, int]) -> None:
        take_version(data, source, lines.get((FORMAT_KEY,)))

    return header


def parse_job_file(text: str, source: str = "<job.json>") -> JobConfig:
    """job.json's text as a JobConfig, with errors naming line and key (ConfigError; JobFileVersionError for
    a version it does not read, checked before any field)."""
    return parse(JobConfig, text, source, header=version_header(source))


def job_from_doc(doc: Any, source: str = "<job.json>") -> JobConfig:
    """An already decoded job.json as a JobConfig (pydantic's ValidationError for bad fields, JobFileVersionError
    for a version it does not read): for readers that need no line numbers (the trainer)."""
    if isinstance(doc, dict):
        doc = dict(doc)
        take_version(doc, source)
    return JobConfig.model_validate(doc)


def load_job_file(path: str | Path) -> JobConfig:
    """Read and decode job.json at `path` (OSError, ValueError for JSON, ValidationError, JobFileVersionError)."""
    with open(path, encoding="utf-8") as f:
        return job_from_doc(json.load(f), str(path))
