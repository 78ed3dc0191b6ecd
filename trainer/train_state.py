"""Everything healing transfers: model, optimizer and data cursor, behind torchft's callbacks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lamplighter.trainer.state_hash import state_hash

if TYPE_CHECKING:
    import torch


@dataclass
class TrainState:
    model: torch.nn.Module
    optim: torch.optim.Optimizer
    replica_id: int
    cursor: int = 0  # global sample cursor (see data.py)
    # Set when a state arrives: "peer:<replica_id>" from torchft's heal, "checkpoint:<step>" from the fallback.
    healed_from: str | None = field(default=None)
    # heal_pad_mb: sent with every heal, like a large optimizer state; not trained, hashed or checkpointed.
    pad: torch.Tensor | None = None
    on_send: Callable[[], None] | None = None  # told when a peer is about to receive this state

    def user_state(self) -> dict[str, Any]:
        """The state that defines training: what is hashed and checkpointed."""
        return {"model": self.model.state_dict(), "optim": self.optim.state_dict(), "data": {"cursor": self.cursor}}

    def state_dict(self) -> dict[str, Any]:
        """torchft's state_dict callback: what a peer sends to a healing group (live tensors; torchft guards them)."""
        if self.on_send is not None:
            self.on_send()
        sd = self.user_state()
        # torchft does not tell the receiver which peer sent the weights; the sender names itself.
        sd["sender"] = {"replica_id": self.replica_id}
        if self.pad is not None:
            sd["pad"] = self.pad
        return sd

    def materialize_optimizer_state(self) -> None:
        """Create Adam(W)'s per-parameter state now, as its first step would (a step of 0, zeroed moments), so
        that a restarted trainer, which heals before its first step, receives the peer's optimizer state into
        these tensors (receive_into) instead of into twice the model's size allocated during the heal: fresh
        pages written by a socket are what made every allocating transport fall to 0.3-0.4 GB/s at 4 GB
        (bench/results/heal_bandwidth.json). The first step then finds the state and uses it, as it would have
        made it: training is bit-identical (tests/trainer/test_heal_in_place.py). Other optimizers: untouched."""
        import torch

        if not isinstance(self.optim, torch.optim.Adam | torch.optim.AdamW):
            return
        for group in self.optim.param_groups:
            if group.get("fused") or group.get("capturable"):
                return  # their step lives on the device: leave them to their own first step
            for p in group["params"]:
                st = self.optim.state[p]
                if st:
                    continue
                st["step"] = torch.tensor(0.0, dtype=torch.get_default_dtype(), device="cpu")
                st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if group.get("amsgrad"):
                    st["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)

    def receive_into(self) -> dict[str, Any]:
        """Where a heal (either transport) may write each tensor in place, laid out as torchft's Manager
        sends it ({"user": {"default": ...}}): no allocation per tensor, and all receives are posted at once
        (bench/results/heal_bandwidth.json). With the optimizer state materialized, every tensor a peer sends
        lands in place, even before the first step. A heal that fails part-way leaves these written but is
        never committed, and the next quorum heals again."""
        sd = self.user_state()
        if self.pad is not None:
            sd["pad"] = self.pad
        return {"user": {"default": sd}}

    def load_user_state(self, sd: dict[str, Any]) -> None:
        self.model.load_state_dict(sd["model"])
        self.optim.load_state_dict(sd["optim"])
        self.cursor = int(sd["data"]["cursor"])

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """torchft's load_state_dict callback, called on the main thread when healing."""
        self.load_user_state(sd)
        if self.pad is not None and "pad" in sd:
            self.pad.copy_(sd["pad"])  # received in full, as a real optimizer state would be
        self.healed_from = f"peer:{sd['sender']['replica_id']}"

    def hash(self) -> str:
        return state_hash(self.user_state())
