"""One line per torchtitan step in lamplighter's step log, with a hash of the group's state.

The line is lamplighter's StepRecord (rundir/steplog.py, whose reader the report uses): the torchft step
after this torchtitan step, whether it committed, the quorum, a heal, the attempt, and `trainer_step`,
torchtitan's own count (it counts attempted steps: a failed commit is a step to torchtitan and not to
torchft, so a job is judged against trainer.steps in torchtitan's counting).

The hash (blake2b, 128 bits) covers this rank's local parameter shards and, in per-step mode, its optimizer
state: after a committed step every replica holds the same bits. In DiLoCo/LocalSGD mode only the
parameters, and only at a sync (each replica's inner optimizer is its own). Rank 0 of each group writes the
group's line; with several ranks per group the hash covers rank 0's shards.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _tensor_bytes(t: Any) -> memoryview:
    local = t.to_local() if hasattr(t, "to_local") else t
    local = local.detach().contiguous().cpu()
    return memoryview(local.view(-1).view(__import__("torch").uint8).numpy())


def state_hash(trainer: Any, with_optimizer: bool) -> str:
    """Hash of the local parameter shards (and the optimizer state), in a fixed order."""
    h = hashlib.blake2b(digest_size=16)
    params = []
    for m in trainer.model_parts:
        for name, p in m.named_parameters():
            h.update(name.encode())
            h.update(_tensor_bytes(p))
            params.append(p)
    if with_optimizer:
        for opt in trainer.optimizers.optimizers:
            for p in (q for g in opt.param_groups for q in g["params"]):
                for key, v in sorted(opt.state.get(p, {}).items()):
                    h.update(key.encode())
                    if hasattr(v, "detach"):
                        h.update(_tensor_bytes(v))
                    else:
                        h.update(repr(v).encode())
            for g in opt.param_groups:
                h.update(repr(sorted((k, v) for k, v in g.items() if k != "params")).encode())
    return h.hexdigest()


@dataclass
class StepLog:
    path: Path
    group: int
    attempt: int
    samples_per_step: int

    @classmethod
    def from_env(cls, env: dict[str, str], samples_per_step: int) -> StepLog | None:
        run_dir, group = env.get("LAMPLIGHTER_RUN_DIR"), env.get("LAMPLIGHTER_REPLICA_ID")
        if not run_dir or group is None or env.get("RANK", "0") != "0":
            return None
        return cls(
            Path(run_dir) / "steps" / f"{int(group)}.jsonl",
            int(group),
            int(env.get("LAMPLIGHTER_ATTEMPT", "0")),
            samples_per_step,
        )

    def write(self, rec: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(rec, separators=(",", ":")) + "\n"
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a writer killed mid-line: end that line first
                line = "\n" + line
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def record(
        self,
        *,
        step: int,
        committed: bool,
        participants: int,
        quorum_id: int,
        healed: bool,
        state: str,
        trainer_step: int,
        inner_steps: int,
    ) -> None:
        self.write(
            {
                "t": time.time(),
                "replica_id": self.group,
                "step": step,
                "committed": committed,
                "participants": participants,
                "quorum_id": quorum_id,
                "healed_from": "peer" if healed else None,
                "loss": 0.0,
                "state_hash": state,
                "attempt": self.attempt,
                "samples": self.samples_per_step * inner_steps,
                "first_sample": 0,
                "trainer_step": trainer_step,
            }
        )
