"""Who this trainer process is: read once from the environment the launcher sets."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from lamplighter.rundir import contract


class IdentityError(ValueError):
    """The launcher's environment is missing or malformed (a configuration error: do not restart)."""


@dataclass(frozen=True)
class Identity:
    replica_id: int
    num_groups: int
    run_dir: str
    attempt: int
    job: str
    lighthouse: str
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    slurm_job_id: str = ""  # "" outside Slurm


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is None:
            raise IdentityError(f"environment variable {name} is not set (the launcher sets it)")
        return default
    try:
        return int(raw)
    except ValueError:
        raise IdentityError(f"environment variable {name}={raw!r} is not an integer") from None


def identity_from_env(env: Mapping[str, str], *, default_run_dir: str, default_job: str) -> Identity:
    """Parse the launcher's environment; single-process defaults for RANK/WORLD_SIZE/MASTER_*."""
    lighthouse = env.get("TORCHFT_LIGHTHOUSE", "")
    if not lighthouse:
        raise IdentityError("environment variable TORCHFT_LIGHTHOUSE is not set (the Lighthouse address)")
    ident = Identity(
        replica_id=_int(env, contract.ENV_REPLICA_ID),
        num_groups=_int(env, contract.ENV_NUM_GROUPS),
        run_dir=env.get(contract.ENV_RUN_DIR) or default_run_dir,
        attempt=_int(env, contract.ENV_ATTEMPT, 0),
        job=env.get(contract.ENV_JOB) or default_job,
        lighthouse=lighthouse,
        rank=_int(env, "RANK", 0),
        world_size=_int(env, "WORLD_SIZE", 1),
        local_rank=_int(env, "LOCAL_RANK", 0),
        master_addr=env.get("MASTER_ADDR") or "127.0.0.1",
        master_port=_int(env, "MASTER_PORT", 0),
        slurm_job_id=env.get("SLURM_JOB_ID", ""),
    )
    if not 0 <= ident.replica_id < ident.num_groups:
        raise IdentityError(f"{contract.ENV_REPLICA_ID}={ident.replica_id} is outside 0..{ident.num_groups - 1}")
    if not 0 <= ident.rank < ident.world_size:
        raise IdentityError(f"RANK={ident.rank} is outside 0..{ident.world_size - 1} (WORLD_SIZE)")
    if ident.world_size > 1 and ident.master_port == 0:
        raise IdentityError("MASTER_PORT=0 needs WORLD_SIZE=1: the other ranks could not find the group's TCPStore")
    return ident


def current_identity(default_run_dir: str, default_job: str) -> Identity:
    return identity_from_env(os.environ, default_run_dir=default_run_dir, default_job=default_job)
