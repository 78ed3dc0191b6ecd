"""How the reference trainer receives a peer's state when it heals: torchft's HTTP transport, loading with
torch's weights-only unpickler.

torchft's HTTPTransport loads what the peer serves with `weights_only=False` (its comment: "some non-tensor
states like lr_scheduler"), a full pickle. The peer is whichever Manager the quorum names as the recovery
source, and torchft's quorum has no authentication: a process that joins it reporting the highest step is
named, and the healing trainer unpickles what it serves, running its code as the job's user. This subclass
loads with `weights_only=True`: tensors, containers, numbers and strings, which is all the reference
trainer's state and torchft's own counters hold; a payload that asks for anything else (a `__reduce__`
that calls a function) is refused, and the heal fails as a lost peer's would (the next quorum tries again).

torchft's process-group transport (`trainer.checkpoint_transport: pg`) unpickles the sender's metadata with
`pickle.loads`: it is no safer, and is kept only for jobs whose network is fenced off (deploy/SECURITY.md).
"""

from __future__ import annotations

import pickle
import urllib.request
from datetime import timedelta
from typing import Any


class HealRefused(RuntimeError):
    """A peer served a state that is not plain weights; names the address."""


def load_weights_only(address: str, timeout: timedelta) -> object:
    """What torchft's HTTPTransport._load_from_address does, with weights_only=True."""
    from torch.distributed._serialization import _streaming_load

    with urllib.request.urlopen(address, timeout=timeout.total_seconds()) as f:
        try:
            return _streaming_load(f, weights_only=True)
        except pickle.UnpicklingError as e:
            # torch's message names the refused global; its first line is enough to say which.
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise HealRefused(f"heal from {address}: refused a state that is not plain weights: {first}") from e


def weights_only_http_transport(timeout: timedelta) -> Any:
    """torchft's HTTPTransport (same server, same wire format, the Manager's default num_chunks=0), receiving
    with weights_only=True. Made here, not at import: this module imports without torch (the plain install)."""
    from torchft.checkpointing.http_transport import HTTPTransport

    class WeightsOnlyHTTPTransport(HTTPTransport[Any]):
        @classmethod
        def _load_from_address(cls, address: str, timeout: timedelta) -> object:
            return load_weights_only(address, timeout)

    return WeightsOnlyHTTPTransport(timeout=timeout, num_chunks=0)
