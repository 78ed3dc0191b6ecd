from __future__ import annotations

from pathlib import Path

import pytest
import torch
from realparts import wait_for

from lamplighter.trainer.fallback_checkpoint import (
    FILE_NAME,
    Checkpoint,
    FallbackWriter,
    load_checkpoint,
    write_checkpoint,
)
from lamplighter.trainer.main import INJECTED_MESSAGE, check_inject
from lamplighter.trainer.state_hash import state_hash


def user(v: float) -> dict[str, object]:
    return {
        "model": {"w": torch.full((3,), v)},
        "optim": {"state": {}, "param_groups": [{"lr": 0.1}]},
        "data": {"cursor": 8},
    }


def test_roundtrip(tmp_path: Path) -> None:
    assert load_checkpoint(tmp_path) is None
    ck = Checkpoint(
        step=5, batches_committed=10, user=user(1.0), state_hash=state_hash(user(1.0)), replica_id=1, time=1.0
    )
    write_checkpoint(tmp_path, ck)
    got = load_checkpoint(tmp_path)
    assert got is not None and got.step == 5 and state_hash(got.user) == ck.state_hash
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]  # no temporary file left behind


def test_corrupt_checkpoint_is_an_error_not_absent(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match="unreadable"):
        load_checkpoint(tmp_path)


def test_writer_snapshots_state_at_submit(tmp_path: Path) -> None:
    logs: list[str] = []
    w = FallbackWriter(tmp_path, interval_s=10.0, start=100.0, log=logs.append)
    assert not w.due(105.0) and w.due(110.0)
    live = user(1.0)
    w.submit(110.0, step=3, batches_committed=6, user=live, state_hash=state_hash(live), replica_id=0)
    live["model"]["w"].add_(5.0)  # type: ignore[index]  # training goes on while the write runs
    wait_for(lambda: w.written == [3], 30, "the checkpoint of step 3 to be written")
    w.close(5.0)
    got = load_checkpoint(tmp_path)
    assert got is not None and torch.equal(got.user["model"]["w"], torch.full((3,), 1.0))
    assert not w.due(115.0) and w.due(120.0)
    assert any("step 3 written" in m for m in logs)


def test_inject_file_raises_once(tmp_path: Path) -> None:
    p = tmp_path / "inject" / "0.exception"
    check_inject(p)  # absent: nothing happens
    p.parent.mkdir()
    p.write_text("")
    with pytest.raises(RuntimeError, match=INJECTED_MESSAGE):
        check_inject(p)
    assert not p.exists()
    check_inject(p)
