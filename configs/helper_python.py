"""`validate`'s look at slurm.helper_python: the interpreter the job scripts run lamplighter's helpers with.

The Lighthouse job runs `<helper_python> -m lamplighter.lighthouse.main`, which needs torchft
(its native extension) and lamplighter on the Lighthouse's node; the in-job agent and the renewal and
release helpers need lamplighter on the groups' nodes. validate can only look on the machine it runs on:
when the interpreter is here it checks it runs and finds both packages (without importing torch);
when it is not, it says it could not check. Either way it names the nodes that need it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

from lamplighter.configs.schema import JobConfig

# Finds the packages without importing them (torchft's __init__ imports torch: seconds).
_PROBE = "import importlib.util as u; print(' '.join(m for m in ('lamplighter', 'torchft') if u.find_spec(m) is None))"
PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class HelperCheck:
    interpreter: str
    checked: bool  # found here and asked
    warnings: list[str]
    where: str = ""  # the Lighthouse's node, which needs torchft

    def line(self) -> str:
        how = (
            "not checked here"
            if not self.checked
            else "has lamplighter and torchft here"
            if not self.warnings
            else "see the warning"
        )
        return f"  helpers     {self.interpreter} ({how}); it runs the Lighthouse on {self.where}"


def lighthouse_node(job: JobConfig) -> str:
    s = job.slurm
    if s.head_node:
        return f"the Lighthouse's node ({s.head_node}, slurm.head_node)"
    part = s.lighthouse_partition or s.partition
    return f"the Lighthouse's node (any node{f' of partition {part}' if part else ''}: set slurm.head_node)"


def check_helper_python(job: JobConfig, here: str = sys.executable) -> HelperCheck:
    py = job.slurm.helper_python or here
    key = "slurm.helper_python" if job.slurm.helper_python else f"slurm.helper_python (unset: this interpreter, {here})"
    where = lighthouse_node(job)
    needs = f"{where} needs it with torchft and lamplighter; the groups' nodes with lamplighter"
    found = shutil.which(py) if os.sep not in py else py
    if found is None or not os.path.exists(found):
        return HelperCheck(
            py, False, where=where, warnings=[f"{key}: not on this machine, so validate cannot check it; {needs}"]
        )
    if not os.path.isfile(found) or not os.access(found, os.X_OK):
        return HelperCheck(py, True, where=where, warnings=[f"{key}: {found} is not an executable file; {needs}"])
    try:
        proc = subprocess.run(
            [found, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return HelperCheck(py, True, where=where, warnings=[f"{key}: {found} does not run here ({e}); {needs}"])
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return HelperCheck(
            py, True, where=where, warnings=[f"{key}: {found} is not a working Python here ({why}); {needs}"]
        )
    missing = proc.stdout.split()
    if missing:
        what = " and ".join(missing)
        return HelperCheck(
            py,
            True,
            where=where,
            warnings=[
                f"{key}: {found} has no {what} here; {needs} (pip install 'lamplighter[trainer]' or torchft "
                "into it, or point slurm.helper_python at an interpreter that has them)"
            ],
        )
    return HelperCheck(py, True, [], where)
