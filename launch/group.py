"""argv and environment for every process of a replica group started on this machine."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from lamplighter.configs.schema import JobConfig
from lamplighter.system.ports import free_port
from lamplighter.trainer.adapter import render_command, trainer_env


def group_launch(
    job: JobConfig,
    *,
    group: int,
    attempt: int,
    lighthouse: str,
    config_path: Path,
    run_dir: Path,
    python: str,
    base_env: Mapping[str, str] | None = None,
) -> tuple[list[list[str]], list[dict[str, str]]]:
    """One argv and one full environment per rank (all ranks of the group run here)."""
    world = job.groups.nproc_per_node * job.groups.nodes
    argv = render_command(job, replica_id=group, lighthouse=lighthouse, config_path=str(config_path), python=python)
    common = dict(os.environ if base_env is None else base_env)
    common.update(
        trainer_env(
            job,
            replica_id=group,
            attempt=attempt,
            lighthouse=lighthouse,
            config_path=str(config_path),
            run_dir=str(run_dir),
        )
    )
    common["PYTHONUNBUFFERED"] = "1"
    # Rank 0 hosts the group's TCPStore. A real port for one process too: a trainer that hands MASTER_PORT
    # to torch.distributed (torchtitan without torchrun) would otherwise have the store client wait on port 0.
    port = free_port()
    envs = []
    for rank in range(world):
        env = dict(common)
        env.update(
            {
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(world),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            }
        )
        envs.append(env)
    return [list(argv) for _ in range(world)], envs
