"""Honest ranges for `lamplighter plan`: the model under pessimistic, central and optimistic inputs.

Each input is an Assumption with three values (low goodput, central, high goodput) and the basis of each;
where the benchmark measured it, the values are read from the measurements (plan/measured.py), and what the
lab cannot measure (NCCL at scale, the split of fault kinds) is named as assumed. A scenario sets all of them
at once, so "low" is every input pessimistic together. A value the user gives (`pinned`) replaces all three.

Published figures to hold the projections against are in PUBLISHED.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from lamplighter.plan import goodput_model as gm
from lamplighter.plan import measured as ms

SCENARIOS = ("low", "central", "high")  # goodput: every assumption pessimistic / central / optimistic

# Meta's FT-HSDP (arXiv 2602.00277, 2026): torchft's authors at O(100k) GPUs, about 3 minutes of stall
# per failure (down from 10 with synchronous training), 80% effective training time.
FT_HSDP_STALL_S = 180.0
FT_HSDP_GPUS = 100_000
# What the lab cannot measure: a group's start on a real cluster beyond what it measured here (NCCL's init
# over the fabric, the weights and the data loader of a real model). A warm spare has done it already.
SCALE_START_S = (240.0, 45.0, 0.0)
LIGHTHOUSE_SHARE_OF_NODE = (1.0, 0.25, 0.1)  # the Lighthouse's host lost at this share of a node's fault rate
STEP_S = 2.0  # the step that torchft's measured per-step cost is spread over at the optimistic end

Measurements = Mapping[str, ms.Measured]
Value = Callable[[gm.Cluster, Measurements], float]


@dataclass(frozen=True)
class Assumption:
    """One uncertain input: its value per scenario (low, central, high goodput) as a function of the
    cluster and the measurements, and why each."""

    key: str  # the Costs or Cluster field it sets
    label: str
    values: tuple[Value, Value, Value]
    basis: tuple[str, str, str]
    unit: str = "s"
    measured: tuple[str, ...] = ()  # the measured inputs it reads (their sources go with the table)


def _const(x: float) -> Value:
    return lambda _c, _m: x


def measured(key: str, i: int, m: Measurements) -> float:
    """The i-th scenario's value of a measured input; the snapshot's where `m` lacks it."""
    return (m.get(key) or ms.snapshot()[key]).values()[i]


def _read(key: str, i: int, plus: float = 0.0) -> Value:
    return lambda _c, m: measured(key, i, m) + plus


def _reads(key: str, plus: float = 0.0) -> tuple[Value, Value, Value]:
    """A measured input in every scenario: its slowest, median and fastest run."""
    return _read(key, 0, plus), _read(key, 1, plus), _read(key, 2, plus)


def _grown(key: str, i: int) -> Value:
    """A measured stall at the lab's few groups, grown by the Lighthouse's measured quorum time per group."""
    return lambda c, m: measured(key, i, m) + measured("quorum_per_group_s", i, m) * c.groups


def _ft_hsdp_scaled(c: gm.Cluster) -> float:
    return FT_HSDP_STALL_S * min(1.0, c.gpus / FT_HSDP_GPUS)


def _central_stall(key: str, plus: float = 0.0) -> Value:
    """FT-HSDP's stall scaled down by GPUs (what the lab's gloo on loopback cannot show: NCCL's reconfiguration
    at scale), never below the measured stall grown to this many groups."""
    return lambda c, m: max(_grown(key, 1)(c, m), _ft_hsdp_scaled(c) + plus)


def _node_rate(share: float) -> Value:
    return lambda c, _m: share * c.gpus_per_node * c.failures_per_gpu_s


def _restart(i: int) -> Value:
    key = "restart_warm_s" if i == 2 else "restart_cold_s"
    return lambda _c, m: measured(key, i, m) + SCALE_START_S[i]


MEASURED_BASIS = ("measured, slowest", "measured, median", "measured, fastest")
GROWN = "measured here at 3-12 groups, grown by the Lighthouse's measured quorum time per group"
ASSUMPTIONS: tuple[Assumption, ...] = (
    Assumption(
        "stall_s",
        "survivors' stall when a group fails",
        (_const(FT_HSDP_STALL_S), _central_stall("stall_s"), _grown("stall_s", 2)),
        (
            "FT-HSDP's ~3 min at ~100k GPUs, at any size",
            "FT-HSDP's ~3 min scaled by GPUs, at least the measured",
            f"a kill, {GROWN}",
        ),
        measured=("stall_s", "quorum_per_group_s"),
    ),
    Assumption(
        "hang_stall_s",
        "survivors' stall when a group hangs",
        (
            _const(FT_HSDP_STALL_S + gm.TORCHFT_PG_TIMEOUT_S),
            _central_stall("hang_stall_s", gm.TORCHFT_PG_TIMEOUT_S),
            _grown("hang_stall_s", 2),
        ),
        (
            "the stall above, after the process group's timeout",
            "the stall above, after the process group's timeout, at least the measured",
            f"a hang (the process group's {gm.TORCHFT_PG_TIMEOUT_S:g} s timeout, then the quorum), {GROWN}",
        ),
        measured=("hang_stall_s", "quorum_per_group_s"),
    ),
    Assumption(
        "rejoin_stall_s",
        "survivors' stall when the group rejoins",
        (_const(FT_HSDP_STALL_S), _central_stall("rejoin_stall_s"), _grown("rejoin_stall_s", 2)),
        (
            "a second full quorum change (torchft reconfigures every member)",
            "a second full quorum change, at least the measured",
            f"the rejoin's quorum change, {GROWN}",
        ),
        measured=("rejoin_stall_s", "quorum_per_group_s"),
    ),
    Assumption(
        "step_overhead",
        "torchft's per-step cost against plain DDP",
        (_const(0.05), _const(0.01), lambda _c, m: measured("step_extra_s", 1, m) / STEP_S),
        (
            "assumed: a Lighthouse round trip and a commit vote per step on short steps",
            "assumed",
            f"torchft's measured time per step over a {STEP_S:g}-s step",
        ),
        unit="of throughput",
        measured=("step_extra_s",),
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
        "bad_node_share",
        "faults that leave their node bad until repaired",
        (_const(0.5), _const(0.4), _const(0.2)),
        (
            "assumed",
            "Llama 3: faulty GPU 30.1% + GPU HBM3 17.2%, less those a reset clears (assumed)",
            "assumed: most GPU faults cleared by a reset",
        ),
        unit="of faults",
    ),
    Assumption(
        "detect_s",
        "an exit seen",
        _reads("detect_s"),
        MEASURED_BASIS,
        measured=("detect_s",),
    ),
    Assumption(
        "hang_detect_s",
        "a hang called",
        _reads("hang_detect_lag_s", gm.LAMPLIGHTER_HANG_TIMEOUT_S),
        (f"health.hang_timeout_s ({gm.LAMPLIGHTER_HANG_TIMEOUT_S:g} s) + the measured lag beyond it",) * 3,
        measured=("hang_detect_lag_s",),
    ),
    Assumption(
        "group_restart_s",
        "a group's restart, detected to first commit (heal aside)",
        (_restart(0), _restart(1), _restart(2)),
        (
            f"a cold restart measured here, slowest, + {SCALE_START_S[0]:g} s of start at scale (assumed)",
            f"a cold restart measured here, median, + {SCALE_START_S[1]:g} s of start at scale (assumed)",
            "a warm spare measured here, fastest (its start done before the fault)",
        ),
        measured=("restart_cold_s", "restart_warm_s"),
    ),
    Assumption(
        "bad_node_s",
        "a bad node to its group running on another",
        _reads("gpu_fault_s"),
        MEASURED_BASIS,
        measured=("gpu_fault_s",),
    ),
    Assumption(
        "queue_wait_s",
        "a fresh submission's wait in the queue",
        _reads("queue_wait_s"),
        ("measured in a busy queue, longest", "measured in a busy queue, median", "measured, shortest"),
        measured=("queue_wait_s",),
    ),
    Assumption(
        "lighthouse_failures_per_s",
        "the Lighthouse lost",
        tuple(_node_rate(x) for x in LIGHTHOUSE_SHARE_OF_NODE),  # type: ignore[arg-type]
        tuple(f"assumed: {x:g} x one node's fault rate" for x in LIGHTHOUSE_SHARE_OF_NODE),  # type: ignore[arg-type]
        unit="/day",
    ),
    Assumption(
        "lighthouse_out_s",
        "a lost Lighthouse to the next commit, under lamplighter",
        _reads("lighthouse_out_s"),
        ("measured (make demo-slurm)",) * 3,
        measured=("lighthouse_out_s",),
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
CLUSTER_KEYS = ("hang_share", "nonlocal_share", "bad_node_share", "lighthouse_failures_per_s")
# What the user set explicitly on the command line keeps its value in every scenario.
Pinned = Mapping[str, float]


def inputs(
    cluster: gm.Cluster, costs: gm.Costs, scenario: str, pinned: Pinned, m: Measurements | None = None
) -> tuple[gm.Cluster, gm.Costs]:
    """The model's inputs in one scenario: every assumption at its value there, unless pinned."""
    i = SCENARIOS.index(scenario)
    got = ms.snapshot() if m is None else m
    value = {a.key: pinned[a.key] if a.key in pinned else a.values[i](cluster, got) for a in ASSUMPTIONS}
    c = replace(
        cluster,
        hang_share=value["hang_share"],
        nonlocal_share=value["nonlocal_share"],
        bad_node_share=value["bad_node_share"],
        lighthouse_failures_per_s=value["lighthouse_failures_per_s"],
    )
    k = replace(
        costs,
        **{a.key: value[a.key] for a in ASSUMPTIONS if a.key not in CLUSTER_KEYS},
        ckpt_read_bps=pinned.get("ckpt_read_bps", value["ckpt_write_bps"]),  # read as fast as written
        # The measured stall's growth per group is inside its value here; a pinned slope still applies.
        stall_per_group_s=pinned.get("stall_per_group_s", 0.0),
    )
    return c, k


def ranges(
    cluster: gm.Cluster, work: gm.Workload, costs: gm.Costs, pinned: Pinned, m: Measurements | None = None
) -> dict[str, tuple[gm.Cluster, gm.Costs, list[gm.Result]]]:
    """Per scenario: its inputs and every strategy's results."""
    out = {}
    for s in SCENARIOS:
        c, k = inputs(cluster, costs, s, pinned, m)
        out[s] = (c, k, gm.compare(c, work, k))
    return out


def assumption_rows(cluster: gm.Cluster, pinned: Pinned, m: Measurements | None = None) -> list[tuple[str, list[str]]]:
    """(label, [low, central, high] as text with their basis) for the table."""
    got = ms.snapshot() if m is None else m
    rows = []
    for a in ASSUMPTIONS:
        if a.key in pinned:
            cells = [f"{_fmt(a, pinned[a.key])} (given)"] * 3
        else:
            cells = [f"{_fmt(a, a.values[i](cluster, got))} ({a.basis[i]})" for i in range(3)]
        rows.append((a.label, cells))
    return rows


def sources(pinned: Pinned, m: Measurements | None = None) -> list[ms.Measured]:
    """The measured inputs the unpinned assumptions read, each once, in the table's order."""
    got = ms.snapshot() if m is None else m
    keys = dict.fromkeys(k for a in ASSUMPTIONS if a.key not in pinned for k in a.measured)
    return [got.get(k) or ms.snapshot()[k] for k in keys]


def _fmt(a: Assumption, v: float) -> str:
    if a.unit == "B/s":
        return f"{v / gm.GB:g} GB/s"
    if a.unit == "/day":
        return f"{v * gm.DAY:.3g}/day"
    if a.unit.startswith("of"):
        return f"{v:.0%}" if v >= 0.01 else f"{v:.2%}"
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
