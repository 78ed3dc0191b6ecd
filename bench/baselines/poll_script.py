"""The poll runner's group script, built the way torchft's Slurm example has torchx build one.

torchft's `examples/slurm/runner.py` submits each replica group as torchx `dist.ddp`: `srun
--kill-on-bad-exit=1 torchrun` with `--max-restarts` left at its default 0, and torchx requeues only
while `TORCHX_MAX_RETRIES` (0) exceeds the restart count, so never. A failed trainer therefore ends
its Slurm job, and the runner's next poll submits a new one. This script does the same for a group
of one process per node (torchrun with no restarts adds nothing but its start-up): srun of the
trainer, `--no-requeue`, and none of lamplighter's parts (no in-job agent, no renewal, no spare).
It takes the trainer, its environment and the allocation from the same job config as every other
arm, so that only the recovery path differs.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from lamplighter.configs.schema import JobConfig
from lamplighter.slurm.render import AGENT_MODULE, group_job_name, sbatch_header, slurm_path_pattern
from lamplighter.trainer import contract
from lamplighter.trainer.adapter import render_command, trainer_env


class PollScriptError(ValueError):
    """A job the poll runner's plain script cannot run as its arm says."""


def poll_group_script(job: JobConfig, group: int, attempt: int, config: Path, python: str, lighthouse: str) -> str:
    """The sbatch script of one group's `attempt`-th submission (its trainer logs that attempt number)."""
    g = job.groups
    if g.nproc_per_node != 1:
        raise PollScriptError(
            f"job {job.name}: the poll runner's script runs one process per node, not {g.nproc_per_node}"
        )
    run_dir = str(config.parent)
    env = trainer_env(
        job,
        replica_id=group,
        attempt=attempt,
        lighthouse=lighthouse,
        config_path=str(config),
        run_dir=run_dir,
    )
    argv = render_command(job, replica_id=group, lighthouse=lighthouse, config_path=str(config), python=python)
    output = slurm_path_pattern(str(contract.RunPaths(Path(run_dir)).logs())) + f"/g{group}-%j.out"
    header = sbatch_header(job, group_job_name(job, group), g.nodes, 1, output, requeue=False)
    return "\n".join(
        [
            "#!/bin/bash",
            f"# poll-10s baseline: replica group {group} of {g.count}, submission {attempt} (torchft's Slurm example:",
            "# a failed trainer ends this job; the runner's next poll submits a new one).",
            *header,
            "",
            "set -euo pipefail",
            *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
            'export MASTER_ADDR="$(hostname)"',
            'export MASTER_PORT="0"',
            "exec srun --kill-on-bad-exit=1 " + " ".join(shlex.quote(a) for a in argv),
            "",
        ]
    )


def has_agent(script: str) -> bool:
    """Whether a script starts lamplighter's in-job agent (the record asserts the poll arm's never do)."""
    return AGENT_MODULE in script
