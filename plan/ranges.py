"""Honest ranges for `lamplighter plan`: the model under pessimistic, central and optimistic assumptions.

At thousands of GPUs the projection is dominated by inputs nobody measured here: the survivors' stall
at hundreds of groups, torchft's per-step cost on real steps, the failures one group's restart cannot
absorb, the share of hangs. Each is an Assumption with three values (low goodput, central, high
goodput) and the basis of each; a scenario sets all of them at once, so "low" is every assumption
pessimistic together. A value the user gives (`pinned`) replaces all three. Pure: no I/O.

Published figures to hold the projections against are in PUBLISHED.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from lamplighter.plan import goodput_model as gm

SCENARIOS = ("low", "central", "high")  # goodput: every assumption pessimistic / central / optimistic

# The survivors' stall on this project's own machine, the optimistic end (no NCCL, no cross-node fabric and
# no step of seconds to throw away), from `make bench-stall` (bench/results/stall_groups.json at f05a235: local
# mode, 3, 6 and 12 groups of one process, loopback, 3 faults of each kind per size). A kill: 0.58, 0.62 and
# 0.61 s (median of the worst survivor), fitted 0.63 - 0.006 s per group: no growth measured, so none assumed
# here. A hang-collective: 4.26, 4.27, 4.35 s (the process group's 3 s timeout, then the quorum). The rejoin's
# second quorum change: 0.04-0.17 s median (one in three took 9.7-13.3 s at 3 and 12 groups: a join timeout).
MEASURED_STALL_BASE_S = 0.63
MEASURED_STALL_PER_GROUP_S = 0.0
MEASURED_HANG_STALL_S = 4.35
MEASURED_REJOIN_STALL_S = 0.17
# Meta's FT-HSDP (arXiv 2602.00277, 2026): torchft's authors at O(100k) GPUs, about 3 minutes of stall
# per failure (down from 10 with synchronous training), 80% effective training time.
FT_HSDP_STALL_S = 180.0
FT_HSDP_GPUS = 100_000


@dataclass(frozen=True)
class Assumption:
    """One uncertain input: its value per scenario (low, central, high goodput) as a function of the
    cluster, and why each."""

    key: str  # the Costs or Cluster field it sets
    label: str
    values: tuple[Callable[[gm.Cluster], float], Callable[[gm.Cluster], float], Callable[[gm.Cluster], float]]
    basis: tuple[str, str, str]
    unit: str = "s"


def _const(x: float) -> Callable[[gm.Cluster], float]:
    return lambda _c: x


def _measured(c: gm.Cluster) -> float:
    return MEASURED_STALL_BASE_S + MEASURED_STALL_PER_GROUP_S * c.groups


def _ft_hsdp_scaled(c: gm.Cluster) -> float:
    """FT-HSDP's stall scaled down by GPUs, never below what was measured here."""
    return max(_measured(c), FT_HSDP_STALL_S * min(1.0, c.gpus / FT_HSDP_GPUS))


ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption(
        "stall_s",
        "survivors' stall when a group fails",
        (_const(FT_HSDP_STALL_S), _ft_hsdp_scaled, _measured),
        (
            "FT-HSDP's ~3 min at ~100k GPUs, at any size",
            "FT-HSDP's ~3 min scaled by GPUs, at least the measured",
            "a kill, measured here at 3-12 groups (make bench-stall): 0.63 s, no growth per group",
        ),
    ),
    Assumption(
        "hang_stall_s",
        "survivors' stall when a group hangs",
        (
            lambda c: FT_HSDP_STALL_S + gm.TORCHFT_PG_TIMEOUT_S,
            lambda c: _ft_hsdp_scaled(c) + gm.TORCHFT_PG_TIMEOUT_S,
            lambda c: MEASURED_HANG_STALL_S + MEASURED_STALL_PER_GROUP_S * c.groups,
        ),
        (
            "the stall above, after the process group's timeout",
            "the stall above, after the process group's timeout",
            "a hang, measured here at 3-12 groups: 4.35 s (the process group's timeout, then the quorum)",
        ),
    ),
    Assumption(
        "rejoin_stall_s",
        "survivors' stall when the group rejoins",
        (_const(FT_HSDP_STALL_S), _ft_hsdp_scaled, _const(MEASURED_REJOIN_STALL_S)),
        (
            "a second full quorum change (torchft reconfigures every member)",
            "a second full quorum change",
            "the rejoin's quorum change, measured here at 3-12 groups: 0.17 s median (2 of 9 kills 10-13 s)",
        ),
    ),
    Assumption(
        "step_overhead",
        "torchft's per-step cost against plain DDP",
        (_const(0.05), _const(0.01), _const(0.002)),
        (
            "a Lighthouse round trip and a commit vote per step on short steps",
            "assumed",
            "a few ms per step (bench/results/overhead.json) over a step of seconds",
        ),
        unit="of throughput",
    ),
    Assumption(
        "nonlocal_share",
        "faults a group restart cannot absorb",
        (_const(0.3), _const(0.2), _const(0.1)),
        (
            "assumed",
            "Llama 3: software bugs 12.9% + network switch/cable 8.4% + silent data corruption 1.4%",
            "assumed: some of those absorbed by a group restart",
        ),
        unit="of faults",
    ),
    Assumption(
        "hang_share",
        "faults that hang rather than exit",
        (_const(0.5), _const(0.25), _const(0.1)),
        ("assumed: NCCL timeouts as a common symptom", "assumed: no published split of symptoms", "assumed"),
        unit="of faults",
    ),
    Assumption(
        "group_restart_s",
        "a group's restart, detected to first commit (heal aside)",
        (_const(300.0), _const(60.0), _const(15.0)),
        ("requeue onto a new node, start, NCCL init", "assumed", "a warm spare in the allocation"),
    ),
    Assumption(
        "job_restart_s",
        "a whole job's restart (read aside)",
        (_const(600.0), _const(300.0), _const(120.0)),
        ("FT-HSDP's synchronous recovery", "assumed", "hot spares (ByteRobust, HyperPod)"),
    ),
    Assumption(
        "ckpt_write_bps",
        "checkpoint write bandwidth of the job",
        (_const(25 * gm.GB), _const(50 * gm.GB), _const(1000 * gm.GB)),
        ("assumed", "assumed", "asynchronous checkpoints to local memory"),
        unit="B/s",
    ),
)
# What the user set explicitly on the command line keeps its value in every scenario.
Pinned = Mapping[str, float]


def inputs(cluster: gm.Cluster, costs: gm.Costs, scenario: str, pinned: Pinned) -> tuple[gm.Cluster, gm.Costs]:
    """The model's inputs in one scenario: every assumption at its value there, unless pinned."""
    i = SCENARIOS.index(scenario)
    value = {a.key: pinned[a.key] if a.key in pinned else a.values[i](cluster) for a in ASSUMPTIONS}
    c = replace(cluster, hang_share=value["hang_share"], nonlocal_share=value["nonlocal_share"])
    k = replace(
        costs,
        stall_s=value["stall_s"],
        hang_stall_s=value["hang_stall_s"],
        rejoin_stall_s=value["rejoin_stall_s"],
        step_overhead=value["step_overhead"],
        group_restart_s=value["group_restart_s"],
        job_restart_s=value["job_restart_s"],
        ckpt_write_bps=value["ckpt_write_bps"],
        ckpt_read_bps=pinned.get("ckpt_read_bps", value["ckpt_write_bps"]),  # read as fast as written
        # The measured stall's growth per group is inside its value here; a pinned slope still applies.
        stall_per_group_s=pinned.get("stall_per_group_s", 0.0),
    )
    return c, k


def ranges(
    cluster: gm.Cluster, work: gm.Workload, costs: gm.Costs, pinned: Pinned
) -> dict[str, tuple[gm.Cluster, gm.Costs, list[gm.Result]]]:
    """Per scenario: its inputs and the three strategies' results."""
    out = {}
    for s in SCENARIOS:
        c, k = inputs(cluster, costs, s, pinned)
        out[s] = (c, k, gm.compare(c, work, k))
    return out


def assumption_rows(cluster: gm.Cluster, pinned: Pinned) -> list[tuple[str, list[str]]]:
    """(label, [low, central, high] as text with their basis) for the table."""
    rows = []
    for a in ASSUMPTIONS:
        if a.key in pinned:
            cells = [f"{_fmt(a, pinned[a.key])} (given)"] * 3
        else:
            cells = [f"{_fmt(a, a.values[i](cluster))} ({a.basis[i]})" for i in range(3)]
        rows.append((a.label, cells))
    return rows


def _fmt(a: Assumption, v: float) -> str:
    if a.unit == "B/s":
        return f"{v / gm.GB:g} GB/s"
    if a.unit.startswith("of"):
        return f"{v:.0%}" if v >= 0.01 else f"{v:.1%}"
    return f"{v:.3g} s"


@dataclass(frozen=True)
class Published:
    source: str
    figure: str
    scale: str


PUBLISHED = (
    Published("Llama 3 (Meta, 2024)", ">90% effective training time", "16,384 H100, 54 days, 419 interruptions"),
    Published("ByteRobust (ByteDance, 2025)", "97% ETTR", "9,600 GPUs, 3 months"),
    Published("SageMaker HyperPod checkpointless (AWS, 2025)", "up to 95% goodput", "recovery under 2 min"),
    Published("FT-HSDP (Meta, 2026)", "~80% effective training time, ~3 min stall per failure", "~100k GPUs"),
)
