"""Which Slurm job and step a process belongs to, from its cgroup: what the kernel says, not the process.

slurmstepd puts every task of a step into that step's cgroup before it execs
the task (proctrack/cgroup), and only root may move a process into another
user's cgroup: a user can forge every variable of her environment but not
this. /proc/PID/cgroup shows one line per hierarchy; three shapes of Slurm's
path are known (22.05):

    cgroup v1, one slurmd per host:   N:freezer:/slurm/uid_U/job_J/step_S[/task_T]
    cgroup v1, several per host:      N:freezer:/slurm_<node>/uid_U/job_J/step_S   (the test cluster)
    cgroup v2:                        0::/<slice>/slurmstepd.scope/job_J/step_S/user/task_T
                                      (several slurmd: <node>_slurmstepd.scope)

The v1 lines were recorded on the test cluster; the v2 shape is Slurm's
documented layout (this machine mounts cgroup v1, so no v2 line was recorded).

Only the start of the path counts: a step's cgroup folder belongs to the job's
user (v1) or has a subtree delegated to it (v2), so the user may create
`.../step_0/job_9/step_0` below her own step. Whatever follows the first
`job_J/step_S` is ignored, and on v1 the path must start at `/slurm` itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_V1_ROOT = re.compile(r"slurm(?:_(?P<node>[^/]+))?")
_V2_SCOPE = re.compile(r"(?:(?P<node>[^/]+)_)?slurmstepd\.scope")
_UID = re.compile(r"uid_(\d+)")
_JOB = re.compile(r"job_(\d+)")
_STEP = re.compile(r"step_([A-Za-z0-9_+]+)")


@dataclass(frozen=True)
class StepCgroup:
    """A process's place in Slurm's cgroups."""

    job_id: int
    step: str  # "0", "1", ..., "batch", "extern", "interactive"
    uid: int | None  # v1 paths name the job's user; v2 paths do not
    node: str | None  # a multiple-slurmd build names the node; one slurmd per host does not

    @property
    def numbered(self) -> int | None:
        """The step's number (an srun step), None for batch, extern and interactive."""
        return int(self.step) if self.step.isdigit() else None


def _v1(path: str) -> StepCgroup | None:
    parts = path.strip("/").split("/")
    if len(parts) < 4:
        return None
    root, uid, job, step = parts[:4]
    m_root, m_uid, m_job, m_step = (
        _V1_ROOT.fullmatch(root),
        _UID.fullmatch(uid),
        _JOB.fullmatch(job),
        _STEP.fullmatch(step),
    )
    if not (m_root and m_uid and m_job and m_step):
        return None
    return StepCgroup(int(m_job.group(1)), m_step.group(1), int(m_uid.group(1)), m_root.group("node"))


def _v2(path: str) -> StepCgroup | None:
    parts = path.strip("/").split("/")
    # The first slurmstepd scope only: nothing a user may create sits above it.
    for i, part in enumerate(parts):
        m_scope = _V2_SCOPE.fullmatch(part)
        if m_scope is None:
            continue
        if len(parts) < i + 3:
            return None
        m_job, m_step = _JOB.fullmatch(parts[i + 1]), _STEP.fullmatch(parts[i + 2])
        if not (m_job and m_step):
            return None
        return StepCgroup(int(m_job.group(1)), m_step.group(1), None, m_scope.group("node"))
    return None


def parse_cgroup(text: str) -> StepCgroup | None:
    """The Slurm step in /proc/PID/cgroup's text, or None when the process is in none.

    cgroup v1: the freezer hierarchy's line (proctrack/cgroup's); cgroup v2: the unified line (`0::`)."""
    unified = None
    for line in text.splitlines():
        num, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not num.isdigit():
            continue
        if "freezer" in controllers.split(","):
            return _v1(path)
        if num == "0" and controllers == "":
            unified = path
    return _v2(unified) if unified is not None else None
