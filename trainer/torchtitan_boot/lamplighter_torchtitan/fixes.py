"""Two upstream bugs that break healing in torchtitan's fault tolerance, and lamplighter's fixes for them.

torchft#347 (RFC torchft#343; torchtitan#4212 depends on it): in per-step mode torchft asks for the
    state dict on its quorum thread, started by `optimizers.zero_grad()` while the training thread runs
    forward. torchtitan's state-dict function then runs FSDP2's state-dict hooks, which swap the modules'
    parameters under the training thread ("mixed torch.Tensor and DTensor", or a segfault in DTensor's
    sharding propagation): the replica that sends a heal dies, every time. Fix: take the state dict on the
    training thread before `zero_grad` and hand torchft that dict; the quorum thread touches no module.
    torchft stops serving it in `should_commit`, before the optimizer changes a tensor.
torchtitan#4598 (merged after 0.3.0): `TorchFTOptimizersContainer.state_dict` returns a dict cached when the
    checkpointer was built, with step 0's learning rate; `LRSchedulersContainer.load_state_dict` restores
    `last_epoch` only, so a healed replica takes its first step at the wrong rate and its weights never
    match its peers' again. Fix: the optimizer's current state dict, taken on the training thread.

The learning rate on a failed commit (found by `make demo-torchtitan`, not filed upstream yet): torchtitan
    steps its LR schedulers after every train step, committed or not, while torchft counts committed steps.
    A replica that heals in a step whose commit then fails holds the sender's schedule, advanced once more
    by its own failed step: from then on it trains at another learning rate than its peers, at the same
    torchft step, and no heal ever corrects it (its step is not behind). Fix: in per-step mode the LR
    schedulers step only when torchft committed the step, so the schedule is a function of the committed
    step on every replica.

DiLoCo and LocalSGD take their quorum on the training thread, under torchft's state-dict lock: #347 does
not apply there (and a snapshot from before the step would be the wrong state at a sync), nor does the
learning-rate fix (inner steps are local and never fail a commit); #4598 does.

`plan` decides, from the torchtitan version and the mode, which fixes apply: a pure function. A version
newer than the last one known to carry a bug gets no fix for it (upstream shipped one, or lamplighter has
not been checked against it: the log says which).
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TORCHFT_347 = "torchft#347"
TORCHTITAN_4598 = "torchtitan#4598"
# Found by lamplighter's demo, not filed upstream yet: no issue number to name.
LR_ON_FAILED_COMMIT = "the learning rate stepped on a step torchft did not commit"

# The newest torchtitan release known to carry each bug (inclusive). Raise it when a release still has the
# bug; releases after it get no fix.
LAST_AFFECTED: dict[str, tuple[int, ...]] = {
    TORCHFT_347: (0, 3),  # every 0.3.x: torchtitan#4212 (state dict on the training thread) is open
    TORCHTITAN_4598: (0, 3, 0),  # fixed upstream after 0.3.0
    LR_ON_FAILED_COMMIT: (0, 3),
}
WHY = {
    TORCHFT_347: "the state dict torchft sends a healing peer is taken on the training thread",
    TORCHTITAN_4598: "the optimizer state sent to a healing peer is its current one, not step 0's",
    LR_ON_FAILED_COMMIT: "the learning-rate schedule advances with committed steps only",
}
PER_STEP_ONLY = (TORCHFT_347, LR_ON_FAILED_COMMIT)


def parse_version(text: str) -> tuple[int, ...]:
    """'0.3.0', '0.3.0+rocm6.4', '0.3.1.dev20260901' -> (0, 3, 0), (0, 3, 0), (0, 3, 1)."""
    nums = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(int(n) for n in nums.group(0).split(".")) if nums else ()


def _at_most(version: tuple[int, ...], last: tuple[int, ...]) -> bool:
    return version[: len(last)] <= last


@dataclass(frozen=True)
class Plan:
    apply: tuple[str, ...]  # the fixes to apply
    notes: tuple[str, ...]  # one line each, logged once at start


def plan(version: str, per_step: bool, enabled: bool = True) -> Plan:
    """Which fixes torchtitan `version` needs in this mode (per_step: semi_sync_method None)."""
    v = parse_version(version)
    apply, notes = [], []
    for fix in (TORCHFT_347, TORCHTITAN_4598, LR_ON_FAILED_COMMIT):
        if fix in PER_STEP_ONLY and not per_step:
            continue  # semi-synchronous: the quorum runs on the training thread; inner steps are local
        if not v or not _at_most(v, LAST_AFFECTED[fix]):
            last = ".".join(map(str, LAST_AFFECTED[fix]))
            notes.append(f"lamplighter: no fix for {fix} on torchtitan {version} (known affected up to {last})")
        elif not enabled:
            notes.append(
                f"lamplighter: NOT applying fix for {fix} on torchtitan {version} (trainer.torchtitan.fixes off)"
            )
        else:
            apply.append(fix)
            notes.append(f"lamplighter: applying fix for {fix} on torchtitan {version}: {WHY[fix]}")
    return Plan(tuple(apply), tuple(notes))


class Snapshot:
    """The state dict torchft sends a healing peer, as the training thread took it before this step's quorum."""

    def __init__(self) -> None:
        self.value: dict[str, Any] | None = None

    def __call__(self) -> dict[str, Any]:
        assert self.value is not None, "no state dict taken on the training thread yet"
        return self.value


def take_state_dict(trainer: Any, fresh_optimizer: bool) -> dict[str, Any]:
    """torchtitan's own state-dict function for torchft (experiments/torchft/checkpoint.py), on this thread."""
    from torchtitan.components.checkpoint import LR_SCHEDULER, MODEL, OPTIMIZER, TRAIN_STATE
    from torchtitan.components.optimizer import OptimizersContainer

    states = trainer.checkpointer.states
    out = {}
    for key in (MODEL, OPTIMIZER, LR_SCHEDULER, TRAIN_STATE):
        if key == OPTIMIZER and fresh_optimizer:
            out[key] = OptimizersContainer.state_dict(states[key])  # past the cache torchtitan#4598 fixed
        else:
            out[key] = states[key].state_dict()
    return out


def install_snapshot(trainer: Any, snapshot: Snapshot) -> None:
    """Make torchft send `snapshot` instead of calling torchtitan's state-dict function on its quorum thread."""
    manager = trainer.ft_manager.manager
    fns = getattr(manager, "_user_state_dicts", None)
    if not isinstance(fns, dict) or "set_state_dict_fns" not in fns:
        raise RuntimeError(
            f"lamplighter: cannot apply the fix for {TORCHFT_347}: torchtitan registered no state-dict function "
            "with torchft (is --checkpoint.enable set? lamplighter renders it for every torchtitan job)"
        )
    fns["set_state_dict_fns"] = snapshot


def fresh_optimizer_on_training_thread(optimizers_cls: type) -> None:
    """torchtitan#4598 in semi-synchronous mode: the container's current state dict when the training thread
    asks (DiLoCo's synchronous quorum); the cached one on any other thread, as before."""
    from torchtitan.components.optimizer import OptimizersContainer

    cached: Callable[[Any], dict[str, Any]] = getattr(optimizers_cls, "state_dict")  # noqa: B009

    def state_dict(self: Any) -> dict[str, Any]:
        if threading.current_thread() is threading.main_thread():
            return OptimizersContainer.state_dict(self)
        return cached(self)

    optimizers_cls.state_dict = state_dict  # type: ignore[attr-defined]


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def torchtitan_version() -> str:
    try:
        import torchtitan

        return str(getattr(torchtitan, "__version__", ""))
    except ImportError:
        return ""
