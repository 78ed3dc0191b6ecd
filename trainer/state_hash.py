"""A sha256 over a training state (model, optimizer, data cursor) in a canonical order.

Two processes hash equal exactly when their weights, optimizer state and
cursor are bit-identical; this is how healing is proven bit-exact.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def _feed(h: Any, key: str, value: object) -> None:
    import torch

    h.update(key.encode() + b"\0")
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        # view as bytes: works for every dtype (bfloat16 has no numpy equivalent)
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy())
    elif isinstance(value, Mapping):
        for k in sorted(value, key=str):
            _feed(h, f"{key}/{k}", value[k])
    elif isinstance(value, (list, tuple)):
        h.update(f"[{len(value)}]".encode())
        for i, v in enumerate(value):
            _feed(h, f"{key}[{i}]", v)
    else:
        # Scalars and hyperparameters; a tuple and a list hash alike (a transfer may turn one into the other).
        h.update(json.dumps(value, sort_keys=True, default=repr).encode())


def state_hash(state: Mapping[str, object]) -> str:
    """sha256 hex of a (nested) state dict of tensors and plain values, keys in sorted order."""
    h = hashlib.sha256()
    _feed(h, "", state)
    return h.hexdigest()
