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
from lamplighter.rundir import contract
from lamplighter.slurm.submit.render import AGENT_MODULE, group_job_name, sbatch_header, slurm_path_pattern
from lamplighter.trainer.adapter import render_command, trainer_env


class PollScriptError(ValueError):
    """A job the poll runner's plain script cannot run as its arm says."""


# In-job restart (what a user picks without lamplighter's daemons: NVRx's ft_launcher, plain torchrun users):
# torchrun restarts the group's failed worker inside the same job, at most this many times, and no one
# resubmits the job once it ends. `env MASTER_PORT=0` gives the trainer's own TCPStore (rank 0 hosts it, as
# torchft's Manager expects one per group) a port of its own, not torchrun's rendezvous store's.
INJOB_MAX_RESTARTS = 3
TORCHRUN_MONITOR_S = 0.1  # torchrun's --monitor-interval default (torch 2.13)


def torchrun_argv(python: str, argv: list[str], max_restarts: int) -> list[str]:
    """The trainer's argv under torchrun: one worker per node, restarted in place up to max_restarts times."""
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=1",
        f"--max-restarts={max_restarts}",
        f"--monitor-interval={TORCHRUN_MONITOR_S:g}",
        "--no-python",
        "env",
        "MASTER_PORT=0",
        *argv,
    ]


def poll_group_script(
    job: JobConfig,
    group: int,
    attempt: int,
    config: Path,
    python: str,
    lighthouse: str,
    *,
    max_restarts: int = 0,
) -> str:
    """The sbatch script of one group's `attempt`-th submission (its trainer logs that attempt number); with
    max_restarts, the in-job restart baseline's: torchrun restarts the trainer inside the job."""
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
    if max_restarts:
        argv = torchrun_argv(python, argv, max_restarts)
    arm = f"in-job restart (torchrun --max-restarts={max_restarts})" if max_restarts else "poll-10s"
    output = slurm_path_pattern(str(contract.RunPaths(Path(run_dir)).logs())) + f"/g{group}-%j.out"
    header = sbatch_header(job, group_job_name(job, group), g.nodes, 1, output, requeue=False)
    return "\n".join(
        [
            "#!/bin/bash",
            f"# {arm} baseline: replica group {group} of {g.count}, submission {attempt}",
            "# (torchrun restarts a failed trainer in this job; once it ends, nothing submits it again)."
            if max_restarts
            else "# (torchft's Slurm example: a failed trainer ends this job; the runner's next poll submits a new one).",
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
