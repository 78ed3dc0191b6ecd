from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lamplighter.trainer.data import BRANCHING, Slice, advance, make_batch, step_slice, transition_table


def test_slice_positions() -> None:
    assert step_slice(100, 0, 3, 4) == Slice(100, 4)
    assert step_slice(100, 2, 3, 4) == Slice(108, 4)
    assert advance(100, 3, 4) == 112
    with pytest.raises(ValueError, match="outside"):
        step_slice(0, 3, 3, 4)


def test_indices_wrap_around_dataset() -> None:
    assert Slice(8, 4).indices(10) == [8, 9, 0, 1]


# One simulated step: which groups are alive (a bitmask over 4 groups), and whether the step commits.
steps_strategy = st.lists(st.tuples(st.integers(1, 15), st.booleans()), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(steps=steps_strategy, batch=st.integers(1, 8))
def test_every_sample_consumed_exactly_once_across_heals(steps: list[tuple[int, bool]], batch: int) -> None:
    """Groups die and come back (healing copies the cursor from a live peer); committed steps
    consume every global sample index exactly once, with no gap."""
    cursors: dict[int, int] = {}  # the cursor of each live group
    consumed: list[int] = []
    for mask, commit in steps:
        alive = [g for g in range(4) if mask >> g & 1]
        if cursors and not set(alive) & set(cursors):
            alive = sorted({*alive, min(cursors)})  # one survivor: with none, the trainer refuses (progress.py)
        # groups that left lose their state; a returning group heals from any live peer with state
        cursors = {g: c for g, c in cursors.items() if g in alive}
        donor = max(cursors.values()) if cursors else 0
        for g in alive:
            cursors.setdefault(g, donor)
        assert len(set(cursors.values())) == 1, "all participants agree on the cursor"
        slices = [step_slice(cursors[g], pos, len(alive), batch) for pos, g in enumerate(alive)]
        if commit:
            for s in slices:
                consumed.extend(range(s.first, s.first + s.count))
            cursors = {g: advance(c, len(alive), batch) for g, c in cursors.items()}
    final = next(iter(cursors.values()))
    assert sorted(consumed) == list(range(final))


def test_batch_is_a_pure_function_of_indices() -> None:
    table = transition_table(64, seed=3)
    a = make_batch([5, 6, 7], seq_len=16, vocab_size=64, seed=3, table=table)
    b = make_batch([7], seq_len=16, vocab_size=64, seed=3, table=transition_table(64, seed=3))
    assert torch.equal(a[2], b[0])
    assert not torch.equal(a[0], a[1])
    assert a.shape == (3, 16) and int(a.max()) < 64 and int(a.min()) >= 0


def test_batch_follows_the_markov_chain() -> None:
    table = transition_table(32, seed=0)
    x = make_batch(list(range(10)), seq_len=20, vocab_size=32, seed=0, table=table)
    for row in x:
        for t in range(1, 20):
            assert int(row[t]) in table[int(row[t - 1])].tolist()
    assert table.shape == (32, BRANCHING)


def test_different_seed_different_data() -> None:
    a = make_batch([0, 1], seq_len=16, vocab_size=64, seed=0, table=transition_table(64, 0))
    b = make_batch([0, 1], seq_len=16, vocab_size=64, seed=1, table=transition_table(64, 1))
    assert not torch.equal(a, b)
