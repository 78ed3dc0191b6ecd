"""A heal over the PG transport writes into the trainer's own tensors: the receiving side's tree must name
exactly the tensors the sending Manager sends, with the same sizes, or torchft allocates them anew."""

from __future__ import annotations

import inspect

import torch
from torch.utils._pytree import tree_flatten_with_path
from torchft.manager import Manager

from lamplighter.configs.schema import ModelConfig
from lamplighter.trainer.model import build_model
from lamplighter.trainer.train_state import TrainState


def _state(steps: int) -> TrainState:
    model = build_model(ModelConfig(dim=16, layers=1, heads=2, seq_len=8, batch_size=2, vocab_size=32))
    state = TrainState(model=model, optim=torch.optim.AdamW(model.parameters(), lr=1e-3), replica_id=0)
    state.pad = torch.zeros(64, dtype=torch.uint8)
    for _ in range(steps):
        torch.stack([p.sum() for p in model.parameters()]).sum().backward()
        state.optim.step()
    return state


def _tensors(tree: object) -> dict[str, torch.Tensor]:
    leaves, _ = tree_flatten_with_path(tree)
    return {str(path): v for path, v in leaves if isinstance(v, torch.Tensor)}


def test_every_tensor_a_peer_sends_lands_in_place_after_a_step() -> None:
    sender, receiver = _state(1), _state(1)
    # As torchft's Manager sends it: its user state_dicts under "user", by the name they were registered with.
    sent = _tensors({"user": {"default": sender.state_dict()}, "torchft": {"step": 3, "batches_committed": 6}})
    into = _tensors(receiver.receive_into())
    assert set(into) == set(sent) and len(into) > 10
    assert all(into[k].nbytes == sent[k].nbytes and into[k].dtype == sent[k].dtype for k in into)
    # The targets are the live tensors, not copies.
    weights = dict(receiver.model.named_parameters())
    assert any(t.data_ptr() == weights[name].data_ptr() for name in weights for t in into.values())
    pad = [t for k, t in into.items() if "'pad'" in k]
    assert len(pad) == 1 and pad[0] is receiver.pad


def test_before_its_first_step_every_tensor_lands_in_place_once_the_optimizer_state_is_materialized() -> None:
    sent = _tensors({"user": {"default": _state(1).state_dict()}})
    fresh = _state(0)
    assert set(_tensors(fresh.receive_into())) < set(sent)  # lazily, Adam has no state before its first step
    fresh.materialize_optimizer_state()
    into = _tensors(fresh.receive_into())
    assert set(into) == set(sent)
    assert all(into[k].nbytes == sent[k].nbytes and into[k].dtype == sent[k].dtype for k in into)


def test_a_materialized_optimizer_trains_bit_identically_to_a_lazy_one() -> None:
    lazy, early = _state(0), _state(0)
    early.materialize_optimizer_state()
    for state in (lazy, early):
        for step in range(3):
            state.optim.zero_grad()
            torch.stack([(p * (step + 1)).sin().sum() for p in state.model.parameters()]).sum().backward()
            state.optim.step()
    assert lazy.hash() == early.hash()
    a, b = _tensors(lazy.user_state()), _tensors(early.user_state())
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_torchfts_manager_still_registers_the_trainers_state_as_default() -> None:
    # The key receive_into() lays its tree under; if torchft renamed it, heals would still work, allocated.
    assert 'register_state_dict_fn("default"' in inspect.getsource(Manager.__init__)
