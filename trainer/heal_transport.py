"""How the reference trainer receives a peer's state when it heals: torchft's HTTP transport, loading with
torch's weights-only unpickler.

torchft's HTTPTransport loads what the peer serves with `weights_only=False` (its comment: "some non-tensor
states like lr_scheduler"), a full pickle. The peer is whichever Manager the quorum names as the recovery
source, and torchft's quorum has no authentication: a process that joins it reporting the highest step is
named, and the healing trainer unpickles what it serves, running its code as the job's user. This subclass
loads with `weights_only=True`: tensors, containers, numbers and strings, which is all the reference
trainer's state and torchft's own counters hold; a payload that asks for anything else (a `__reduce__`
that calls a function) is refused, and the heal fails as a lost peer's would (the next quorum tries again).
Given the trainer's own state (`receive_into`), it reads each tensor straight into the trainer's
(trainer/heal_stream.py): a heal then never touches fresh memory for the tensors it can place.

torchft's process-group transport (`trainer.checkpoint_transport: pg`) unpickles the sender's metadata with
`pickle.loads`: it is no safer, and is kept only for jobs whose network is fenced off (deploy/SECURITY.md).
"""

from __future__ import annotations

import pickle
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from lamplighter.trainer.heal_stream import HealStreamError, load_into


class HealRefused(RuntimeError):
    """A peer served a state that is not plain weights; names the address."""


def load_weights_only(address: str, timeout: timedelta, dest: object | None = None) -> object:
    """What torchft's HTTPTransport._load_from_address does, with weights_only=True, into `dest`'s tensors
    where they match what the peer sends."""
    with urllib.request.urlopen(address, timeout=timeout.total_seconds()) as f:
        try:
            return load_into(f, dest, f"heal from {address}")
        except pickle.UnpicklingError as e:
            # torch's message names the refused global; its first line is enough to say which.
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise HealRefused(f"heal from {address}: refused a state that is not plain weights: {first}") from e
        except HealStreamError as e:
            raise HealRefused(str(e)) from e


def weights_only_http_transport(timeout: timedelta, receive_into: Callable[[], object] | None = None) -> Any:
    """torchft's HTTPTransport (same server, same wire format, the Manager's default num_chunks=0), receiving
    with weights_only=True, into `receive_into()`'s tensors (laid out as the Manager sends its state) when
    given. Made here, not at import: this module imports without torch (the plain install)."""
    from torchft.checkpointing.http_transport import HTTPTransport

    class WeightsOnlyHTTPTransport(HTTPTransport[Any]):
        def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: timedelta) -> Any:
            dest = receive_into() if receive_into is not None else None
            return load_weights_only(f"{metadata}{step}/full", timeout, dest)

    return WeightsOnlyHTTPTransport(timeout=timeout, num_chunks=0)
