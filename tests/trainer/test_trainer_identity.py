from __future__ import annotations

import pytest

from lamplighter.rundir import contract
from lamplighter.trainer.identity import IdentityError, identity_from_env

BASE = {
    contract.ENV_REPLICA_ID: "1",
    contract.ENV_NUM_GROUPS: "3",
    contract.ENV_RUN_DIR: "/r",
    contract.ENV_ATTEMPT: "2",
    contract.ENV_JOB: "j",
    "TORCHFT_LIGHTHOUSE": "http://h:1",
}


def test_single_process_defaults() -> None:
    ident = identity_from_env(BASE, default_run_dir="x", default_job="y")
    assert (ident.replica_id, ident.num_groups, ident.attempt, ident.run_dir, ident.job) == (1, 3, 2, "/r", "j")
    assert (ident.rank, ident.world_size, ident.master_addr, ident.master_port) == (0, 1, "127.0.0.1", 0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({contract.ENV_REPLICA_ID: "3"}, "outside 0..2"),
        ({contract.ENV_REPLICA_ID: "one"}, "not an integer"),
        ({"TORCHFT_LIGHTHOUSE": ""}, "TORCHFT_LIGHTHOUSE"),
        ({"WORLD_SIZE": "2", "RANK": "1"}, "MASTER_PORT=0"),
        ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_PORT": "5"}, "RANK=2"),
    ],
)
def test_bad_environment_is_named(change: dict[str, str], message: str) -> None:
    with pytest.raises(IdentityError, match=message):
        identity_from_env({**BASE, **change}, default_run_dir="x", default_job="y")


def test_missing_replica_id() -> None:
    env = {k: v for k, v in BASE.items() if k != contract.ENV_REPLICA_ID}
    with pytest.raises(IdentityError, match=contract.ENV_REPLICA_ID):
        identity_from_env(env, default_run_dir="x", default_job="y")
