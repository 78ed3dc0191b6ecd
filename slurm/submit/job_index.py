"""The jobs a user submitted, by name: so that `status NAME` and `why NAME` find a job wherever its run dir is.

`lamplighter submit` adds `name -> run_dir` to the user's own index,
`$XDG_STATE_HOME/lamplighter/jobs.json` (default ~/.local/state/...). Root
never writes one: root's commands name run directories or config files.
Besides the index, `$LAMPLIGHTER_RUNS` (folders separated by `:`, like PATH)
is searched for `<folder>/<name>`, and last `./runs/<name>`, where a job
without `run_dir` runs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ENV_RUNS = "LAMPLIGHTER_RUNS"
SUBMISSION_FILE = "submission.json"
MAX_ENTRIES = 500  # the oldest go first: an index is a convenience, not a record


def index_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    state = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(state) / "lamplighter" / "jobs.json"


def read_index(path: Path) -> dict[str, dict[str, object]]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    return {k: v for k, v in jobs.items() if isinstance(v, dict)} if isinstance(jobs, dict) else {}


def remember(name: str, run_dir: str, env: Mapping[str, str] | None = None, now: float | None = None) -> Path | None:
    """Add the job to this user's index (atomically); None when not written (root, or it cannot be)."""
    if os.geteuid() == 0:
        return None
    path = index_path(env)
    jobs = read_index(path)
    jobs[name] = {"run_dir": str(run_dir), "submitted_at": time.time() if now is None else now}
    keep = sorted(jobs.items(), key=lambda kv: float(kv[1].get("submitted_at") or 0))[-MAX_ENTRIES:]  # type: ignore[arg-type]
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"jobs": dict(keep)}, indent=1))
        tmp.replace(path)
    except OSError:
        return None
    return path


@dataclass
class Lookup:
    """Where a job name was looked for, and the run directory found (None: none of them)."""

    found: Path | None = None
    looked: list[str] = field(default_factory=list)

    def where(self) -> str:
        return "; ".join(self.looked)


def find_by_name(name: str, base: Path, env: Mapping[str, str] | None = None) -> Lookup:
    """The run directory of the job called `name`: the user's index, then $LAMPLIGHTER_RUNS, then base/runs."""
    env = os.environ if env is None else env
    out = Lookup()
    index = index_path(env)
    entry = read_index(index).get(name) if os.geteuid() != 0 else None
    if entry is not None and (Path(str(entry.get("run_dir"))) / SUBMISSION_FILE).is_file():
        out.found = Path(str(entry["run_dir"])).resolve()
        return out
    out.looked.append(
        f"{index} (no job {name})" if entry is None else f"{index} ({entry.get('run_dir')}: no {SUBMISSION_FILE})"
    )
    for folder in [f for f in env.get(ENV_RUNS, "").split(":") if f]:
        candidate = Path(folder) / name
        if candidate.is_dir():
            out.found = candidate.resolve()
            return out
        out.looked.append(f"{candidate} (${ENV_RUNS})")
    candidate = base / "runs" / name
    if candidate.is_dir():
        out.found = candidate.resolve()
        return out
    out.looked.append(str(candidate))
    return out
