"""The agent's srun steps: the trainer's, the warm spare's, and turning the spare into the trainer.

The rendered script hands the agent the trainer step's whole command line:
`srun --kill-on-bad-exit=1 [options] bash -c TASK_WRAPPER lamplighter-task TRAINER ARGV...`. The spare
is the same step with `--overlap` (it shares the job's CPUs, memory and GRES with the trainer; Slurm
22.05) and `--input=all`, running the standby (launch/standby.py) under the same task wrapper
instead of the trainer: each of its tasks sits in the job's own step cgroup, with the rank, devices and
limits a cold trainer would have, and waits past its imports. To become the trainer, the agent writes
one JSON line to the spare's stdin, which srun forwards to every task (Slurm's own authenticated I/O
forwarding, on every node of the group): the trainer's argv, the variables that changed since the spare
started (the attempt, the Lighthouse's address) and its directory. Then each task runs the trainer in
place, with the exit codes a cold one would have.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lamplighter.launch.standby import target_of

TASK_MARK = "lamplighter-task"  # the task wrapper's $0 (slurm/submit/render.py): srun's argv ends there
STANDBY_MODULE = "lamplighter.launch.standby"


@dataclass(frozen=True)
class StepCommand:
    launch: list[str]  # srun ... bash -c TASK_WRAPPER lamplighter-task
    trainer: list[str]  # what each task runs

    @classmethod
    def split(cls, argv: Sequence[str]) -> StepCommand:
        if TASK_MARK not in argv or (argv[0] != "srun" and not argv[0].endswith("/srun")):
            raise ValueError(f"not an srun step under lamplighter's task wrapper: {list(argv)!r}")
        i = list(argv).index(TASK_MARK) + 1
        if i >= len(argv):
            raise ValueError(f"no trainer command after {TASK_MARK}: {list(argv)!r}")
        return cls(list(argv[:i]), list(argv[i:]))

    @property
    def argv(self) -> list[str]:
        return self.launch + self.trainer

    def why_no_spare(self) -> str | None:
        """Why this trainer cannot start from a spare (None: it can)."""
        if not target_of(self.trainer):
            return f"{self.trainer!r} is not `PYTHON -m MODULE ...` or `PYTHON SCRIPT ...`: every restart starts cold"
        return None

    def spare_argv(self, preload: Sequence[str]) -> list[str]:
        """The spare step: the trainer's geometry, sharing its allocation, every task reading the same stdin."""
        kind, name = target_of(self.trainer)
        mods = list(dict.fromkeys([*preload, *([name] if kind == "module" else [])]))
        standby = [self.trainer[0], "-m", STANDBY_MODULE, *(a for m in mods for a in ("--preload", m))]
        return [self.launch[0], "--overlap", "--input=all", *self.launch[1:], *standby]


def start_step(argv: Sequence[str], env: Mapping[str, str], *, stdin_pipe: bool = False) -> subprocess.Popen[bytes]:
    """An srun step; its output is the job's (the agent's own stdout and stderr)."""
    return subprocess.Popen(
        list(argv), env=dict(env), stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL, close_fds=True
    )


def activation_line(trainer: Sequence[str], env_set: Mapping[str, str], cwd: str) -> bytes:
    """What every task of the spare reads: become this trainer, with these variables changed."""
    return (json.dumps({"argv": list(trainer), "env": dict(env_set), "cwd": cwd, "merge_env": True}) + "\n").encode()


def activate(spare: subprocess.Popen[bytes], line: bytes) -> bool:
    """Hand the spare its trainer (then end of input); False when it can no longer take it (it died meanwhile)."""
    if spare.stdin is None or spare.poll() is not None:
        return False
    try:
        spare.stdin.write(line)
        spare.stdin.close()
    except OSError:
        return False
    return spare.poll() is None


def retire(spare: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """End of input: each standby exits 0 (the step is killed only if it does not)."""
    try:
        if spare.stdin is not None and not spare.stdin.closed:
            spare.stdin.close()
    except OSError:
        pass
    try:
        spare.wait(timeout)
    except subprocess.TimeoutExpired:
        spare.kill()
        spare.wait(5)
