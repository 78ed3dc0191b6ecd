"""The goodput runs' fault schedule: where in a run each fault falls, and of which kind (pure, seeded)."""

from __future__ import annotations

import random

from lamplighter.supervisor.chaos import PlannedFault

START_AFTER_S = 3.0  # no fault in the first seconds of training


def schedule(mtbf_s: float | None, seed: int, kinds: list[str], horizon_s: float) -> list[PlannedFault]:
    """One fault at a random moment of every MTBF-long window after START_AFTER_S, kinds drawn from the seed.

    The mean time between faults is the MTBF, as with exponential gaps, but a short run cannot draw zero
    faults by chance: with only a few windows per run, exponential gaps left whole runs fault-free.
    """
    if mtbf_s is None:
        return []
    rng = random.Random(seed)
    out, k = [], 0
    while START_AFTER_S + k * mtbf_s < horizon_s:
        at = START_AFTER_S + (k + rng.random()) * mtbf_s
        out.append(PlannedFault(round(at, 3), rng.choice(kinds), None))
        k += 1
    return out
