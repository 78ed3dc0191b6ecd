from __future__ import annotations

import copy

import torch

from lamplighter.configs.schema import ModelConfig
from lamplighter.trainer.model import build_model, lm_loss
from lamplighter.trainer.state_hash import state_hash

TINY = ModelConfig(dim=16, layers=1, heads=2, seq_len=8, batch_size=2, vocab_size=32)


def trained_state(steps: int) -> dict[str, object]:
    model = build_model(TINY)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tokens = torch.arange(16).reshape(2, 8) % 32
    for _ in range(steps):
        opt.zero_grad()
        lm_loss(model, tokens).backward()
        opt.step()
    return {"model": model.state_dict(), "optim": opt.state_dict(), "data": {"cursor": 4 * steps}}


def test_same_training_same_hash() -> None:
    assert state_hash(trained_state(2)) == state_hash(trained_state(2))


def test_hash_sees_every_part() -> None:
    base = trained_state(1)
    h = state_hash(base)
    assert state_hash(trained_state(2)) != h
    cursor = copy.deepcopy(base)
    cursor["data"] = {"cursor": 5}
    assert state_hash(cursor) != h
    one_bit = copy.deepcopy(base)
    w = one_bit["model"]["tok.weight"]  # type: ignore[index]
    w.view(torch.int32)[0, 0] ^= 1  # flip the lowest bit of one weight
    assert state_hash(one_bit) != h
    opt_state = copy.deepcopy(base)
    opt_state["optim"]["state"][0]["exp_avg"][0] += 1.0  # type: ignore[index]
    assert state_hash(opt_state) != h


def test_hash_ignores_key_order_and_tuple_vs_list() -> None:
    a = {"b": torch.ones(2), "a": {"betas": (0.9, 0.99), "lr": 1e-3}}
    b = {"a": {"lr": 1e-3, "betas": [0.9, 0.99]}, "b": torch.ones(2)}
    assert state_hash(a) == state_hash(b)


def test_hash_sees_dtype_and_shape() -> None:
    assert state_hash({"x": torch.zeros(4)}) != state_hash({"x": torch.zeros(2, 2)})
    assert state_hash({"x": torch.zeros(4)}) != state_hash({"x": torch.zeros(4, dtype=torch.float64)})


def test_model_is_seeded_and_loss_starts_near_uniform() -> None:
    a, b = build_model(TINY), build_model(TINY)
    assert state_hash(a.state_dict()) == state_hash(b.state_dict())
    tokens = torch.randint(32, (4, 8), generator=torch.Generator().manual_seed(0))
    assert abs(float(lm_loss(a, tokens).detach()) - torch.log(torch.tensor(32.0)).item()) < 0.5
