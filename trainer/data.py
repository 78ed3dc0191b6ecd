"""Deterministic synthetic data and which samples a replica group takes.

Sample i is a walk of a seeded Markov chain over the vocabulary (each token
has a few likely successors), so the loss visibly falls from log(vocab)
towards log(branching). Any sample can be produced from (seed, i) alone.

Which samples a group takes is a pure function of a global sample cursor
(part of the state that healing transfers) and the group's position in the
quorum: participant p of P takes [cursor + p*B, cursor + (p+1)*B) and each
committed step advances the cursor by P*B. A healed group receives the
cursor with the weights, so no sample is skipped or consumed twice however
the participants change between steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

BRANCHING = 4  # successors per token in the Markov chain


@dataclass(frozen=True)
class Slice:
    """The samples one group consumes in one step: global indices [first, first + count)."""

    first: int
    count: int

    def indices(self, dataset_size: int) -> list[int]:
        """Dataset indices (the global index wraps around the dataset)."""
        return [(self.first + k) % dataset_size for k in range(self.count)]


def step_slice(cursor: int, position: int, participants: int, batch_size: int) -> Slice:
    """The slice for participant `position` of `participants` when the cursor is at `cursor`."""
    if not 0 <= position < participants:
        raise ValueError(f"quorum position {position} is outside 0..{participants - 1}")
    return Slice(cursor + position * batch_size, batch_size)


def advance(cursor: int, participants: int, batch_size: int) -> int:
    """The cursor after a committed step with `participants` groups."""
    return cursor + participants * batch_size


def transition_table(vocab_size: int, seed: int) -> torch.Tensor:
    """(vocab_size, BRANCHING) successors of each token."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + 17)
    return torch.randint(vocab_size, (vocab_size, BRANCHING), generator=g)


def make_batch(indices: list[int], *, seq_len: int, vocab_size: int, seed: int, table: torch.Tensor) -> torch.Tensor:
    """Token sequences (len(indices), seq_len) for the given dataset indices; a pure function."""
    import torch

    starts = torch.empty(len(indices), dtype=torch.long)
    choices = torch.empty(len(indices), seq_len, dtype=torch.long)
    for row, i in enumerate(indices):
        g = torch.Generator().manual_seed((seed << 40) ^ i)
        starts[row] = int(torch.randint(vocab_size, (1,), generator=g))
        choices[row] = torch.randint(BRANCHING, (seq_len,), generator=g)
    out = torch.empty(len(indices), seq_len, dtype=torch.long)
    out[:, 0] = starts
    for t in range(1, seq_len):
        out[:, t] = table[out[:, t - 1], choices[:, t]]
    return out
