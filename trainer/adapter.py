"""Turn a job's trainer command template and settings into argv and environment.

The supervisor (local or Slurm) starts every trainer through these two
functions, whether it is lamplighter's reference trainer or a third-party one
such as torchtitan. Each template argument is formatted on its own and stays
one argv element: nothing is split or run through a shell.

With `trainer.kind: torchtitan` the job's own settings become torchtitan's
flags, appended to the command (configs/torchtitan.py names them and the
settings they come from); the schema refuses a command that types one of them.
"""

from __future__ import annotations

import os

from lamplighter.configs import torchtitan_flags as torchtitan
from lamplighter.configs.schema import TRAINER_PLACEHOLDERS, JobConfig
from lamplighter.rundir import contract

DEFAULT_COMMAND = ["{python}", "-m", "lamplighter.trainer", "--config", "{config}"]


def job_run_dir(job: JobConfig) -> str:
    """The run directory the job's files go to."""
    return job.run_dir or f"runs/{job.name}"


def placeholder_values(
    job: JobConfig, *, replica_id: int, lighthouse: str, config_path: str, python: str
) -> dict[str, str]:
    """The value of every placeholder in TRAINER_PLACEHOLDERS for one replica group."""
    values = {
        "replica_id": str(replica_id),
        "group_size": str(job.groups.count),
        "num_groups": str(job.groups.count),
        "lighthouse": lighthouse,
        "nproc_per_node": str(job.groups.nproc_per_node),
        "gpus_per_node": str(job.groups.gpus_per_node),
        "nnodes": str(job.groups.nodes),
        "job": job.name,
        "run_dir": job_run_dir(job),
        "python": job.trainer.python or python,
        "config": config_path,
        "steps": str(job.trainer.steps),
    }
    assert set(values) == set(TRAINER_PLACEHOLDERS), "adapter out of step with TRAINER_PLACEHOLDERS"
    return values


def render_command(job: JobConfig, *, replica_id: int, lighthouse: str, config_path: str, python: str) -> list[str]:
    """argv for one process of a replica group: the job's template (or the reference trainer's) filled in."""
    values = placeholder_values(
        job, replica_id=replica_id, lighthouse=lighthouse, config_path=config_path, python=python
    )
    template = job.trainer.command if job.trainer.command is not None else DEFAULT_COMMAND
    try:
        argv = [arg.format_map(values) for arg in template]
    except (KeyError, ValueError, IndexError) as e:
        raise ValueError(f"job {job.name}: cannot render trainer.command {template!r}: {e}") from e
    if job.trainer.resolved_kind == "torchtitan":
        argv = torchtitan.with_boot(argv) + torchtitan_flags(job, replica_id=replica_id, argv=argv)
    return argv


def torchtitan_flags(job: JobConfig, *, replica_id: int, argv: list[str]) -> list[str]:
    """torchtitan's flags from the job's settings, for one group (argv: the command they are appended to)."""
    t = job.trainer
    # A --dump_folder in the command wins; else one folder in the run directory, shared by every
    # group and kept across requeues (full checkpoints and each replica's dataloader checkpoint).
    has_dump = any(torchtitan.flag_path(a) == torchtitan.DUMP_FOLDER for a in argv)
    return torchtitan.flags(
        replica_id=replica_id,
        group_size=job.groups.count,
        min_replicas=job.lighthouse.min_replicas,
        backend=t.backend,
        gpus_per_node=job.groups.gpus_per_node,
        pg_timeout_s=job.torchft.pg_timeout_s,
        steps=t.steps,
        dataloader_checkpoint=t.torchtitan.dataloader_checkpoint,
        dump_folder=None if has_dump else os.path.join(job_run_dir(job), torchtitan.DUMP_SUBDIR),
    )


def trainer_env(
    job: JobConfig,
    *,
    replica_id: int,
    attempt: int,
    lighthouse: str,
    config_path: str,
    run_dir: str,
    boot_dir: str | None = None,
) -> dict[str, str]:
    """Environment to add for every process of a replica group (RANK etc. are the launcher's).

    `boot_dir`: where the trainers find lamplighter's torchtitan launch (trainer.kind torchtitan): on Slurm
    the run dir's copy (contract.RunPaths.boot, which `submit` writes), default the installed folder."""
    ft = job.torchft
    env = {
        contract.ENV_REPLICA_ID: str(replica_id),
        contract.ENV_NUM_GROUPS: str(job.groups.count),
        contract.ENV_RUN_DIR: run_dir,
        contract.ENV_CONFIG: config_path,
        contract.ENV_ATTEMPT: str(attempt),
        contract.ENV_JOB: job.name,
        # The names torchft's own examples read (torchft/torchx.py).
        "REPLICA_GROUP_ID": str(replica_id),
        "NUM_REPLICA_GROUPS": str(job.groups.count),
        "TORCHFT_LIGHTHOUSE": lighthouse,
        # Whole seconds: torchft's env overrides reject fractions.
        "TORCHFT_TIMEOUT_SEC": str(ft.timeout_s),
        "TORCHFT_QUORUM_TIMEOUT_SEC": str(ft.quorum_timeout_s),
        "TORCHFT_CONNECT_TIMEOUT_SEC": str(ft.connect_timeout_s),
        # Without retries a quorum request in flight when the Lighthouse restarts is never re-sent:
        # every group fails at once and none is left to heal the others.
        "TORCHFT_QUORUM_RETRIES": str(ft.quorum_retries),
        # One thread per process unless the user says otherwise: groups share the CPU.
        "OMP_NUM_THREADS": "1",
    }
    env.update(job.trainer.env)
    if job.trainer.resolved_kind == "torchtitan":
        env.update(torchtitan_boot_env(job, boot_dir))
    return env


# lamplighter's launch for torchtitan (torchtitan_boot/lamplighter_torchtitan), run by the training
# environment's interpreter: it needs this folder, not lamplighter installed there. Local mode uses it here;
# on Slurm the trainers (in a container that never sees this install) use the run dir's copy (boot_copy.py).
TORCHTITAN_BOOT_DIR = os.path.join(os.path.dirname(os.path.realpath(__file__)), "torchtitan_boot")


def torchtitan_boot_env(job: JobConfig, boot_dir: str | None = None) -> dict[str, str]:
    """PYTHONPATH with lamplighter's torchtitan launch first (`boot_dir`, default the installed folder; then the
    job's own), and the launch's settings."""
    t = job.trainer
    own = t.env.get("PYTHONPATH")
    boot = boot_dir or TORCHTITAN_BOOT_DIR
    return {
        "PYTHONPATH": boot if not own else f"{boot}{os.pathsep}{own}",
        "LAMPLIGHTER_TORCHTITAN_FIXES": t.torchtitan.fixes,
        "LAMPLIGHTER_TORCHTITAN_STATE_HASH": "1" if t.torchtitan.state_hash else "0",
    }
