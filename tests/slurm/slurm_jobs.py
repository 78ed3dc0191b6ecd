"""Helpers shared by the real-cluster tests: a rendered group job whose 'trainer' records its env and sleeps."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from lamplighter.configs.schema import JobConfig
from lamplighter.slurm.submit.render import render_job

# Writes <run_dir>/rec/<replica>-<attempt>-<rank>.json, then sleeps until killed.
RECORD_AND_SLEEP = (
    "import json, os, sys, time; e = dict(os.environ); "
    "p = os.path.join(sys.argv[1], 'rec', '%s-%s-%s.json' % (sys.argv[2], e['LAMPLIGHTER_ATTEMPT'], e['RANK'])); "
    "os.makedirs(os.path.dirname(p), exist_ok=True); "
    "open(p + '.tmp', 'w').write(json.dumps(dict(argv=sys.argv, env=e))); os.replace(p + '.tmp', p); "
    "time.sleep(600)"
)


def group_script(tmp: Path, name: str = "t", **kw: Any) -> tuple[Path, Path]:
    """Render a one-group job; return (group-0 script, run dir)."""
    run_dir = tmp / f"run {name}"
    job = JobConfig(
        name=name,
        run_dir=str(run_dir),
        groups={"count": 1},
        trainer={"command": ["{python}", "-c", RECORD_AND_SLEEP, "{run_dir}", "{replica_id}"]},
        # No trainer here talks to a Lighthouse: a fixed address stands in for one (none is started); a name
        # that resolves on the lab's nodes only, so nothing is ever sent to it from this machine.
        lighthouse={"host": "n1", "port": 29597},
        slurm={"head_node": "n1", **kw.pop("slurm", {})},
        **kw,
    )
    scripts = render_job(job, tmp / f"scripts-{name}", python=sys.executable)
    return scripts[-1], run_dir


def wait_record(run_dir: Path, attempt: int, timeout: float = 30.0, replica: int = 0, rank: int = 0) -> dict[str, Any]:
    path = run_dir / "rec" / f"{replica}-{attempt}-{rank}.json"
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no record {path} after {timeout} s; logs: {list((run_dir / 'logs').glob('*'))}")
        time.sleep(0.05)
    rec: dict[str, Any] = json.loads(path.read_text())
    return rec
