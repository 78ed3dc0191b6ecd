"""A goodput model: lamplighter, checkpoint-restart, torchft's 10 s poll runner and in-job restart on N GPUs.

Pure functions of frozen dataclasses: no I/O, no torch. Every time is in seconds, every size in
bytes, every bandwidth in bytes per second, every rate per second.

Notation (all per job):
    N      GPUs in the job;  g = GPUs per replica group;  R = N / g groups
    u      GPUs a fault takes out = max(g, GPUs per node): faults hit a node, and a node's
           groups all restart elsewhere (lamplighter drains the node); one group when g spans nodes
    lam    failures per GPU per second;  L = N * lam failures of the job per second;  M = 1 / L (job MTBF)
    h      share of faults that are hangs (the process lives, the step never ends)
    b      share of faults that are exits leaving their node bad until repaired (a lemon); the rest plain exits
    S      state bytes of one model replica = params * bytes_per_param

Goodput is the fraction of the fault-free throughput that is kept: the share of GPU-seconds that train.
"Fault-free" means plain synchronous training with nothing failing: no faults, no checkpoints and no
torchft (whose per-step quorum costs the torchft strategies `step_overhead` even when nothing fails).
Lost GPU-hours per day = (1 - goodput) * N * 24.

How losses compose (the same rule `replay` applies to a recorded run's faults):
- A fault takes its u GPUs out for a recovery time, and stalls every other group for a while (torchft's
  quorum change). A group is training at a moment unless some fault's window covers it: windows that
  overlap count once, not twice (with 3 groups and dense faults, adding them up counted the same
  seconds twice and under-predicted the benchmark by 24%).
- Faults strike what is running: a group that is out is not hit again until it is back (an alternating
  renewal process), so the share of time a unit is out is u*lam*D / (1 + u*lam*D) for a recovery of D
  seconds, never above 1.
- A share of the faults (`nonlocal_share`: network fabric, software bugs, silent data corruption, storage)
  cannot be absorbed by restarting one group: for the torchft strategies each costs a job restart from the
  fallback checkpoint (every GPU down for detection, the job's restart, the read, and half the fallback
  interval of work redone), as every fault does for checkpoint-restart.

Assumptions shared by all:
- Faults are a Poisson process in the running time of each unit (u GPUs), independent between units.
- A free node takes a failed node's place at once (a spare, or the scheduler's idle pool); waiting for
  a repair is not modelled.
- Throughput is proportional to the GPUs training: a group out of R costs 1/R of the samples (torchft
  commits with the groups in the quorum), and the step time of the others does not change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

GB = 1e9
HOUR = 3600.0
DAY = 86_400.0

# Llama 3 (Meta, "The Llama 3 Herd of Models", 2024, section 3.3.4): 419 unexpected interruptions
# in a 54-day snapshot of pre-training on 16,384 H100 GPUs.
LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54.0
LLAMA3_GPUS = 16_384
LLAMA3_FAILURES_PER_GPU_S = LLAMA3_INTERRUPTIONS / (LLAMA3_DAYS * DAY * LLAMA3_GPUS)

# State per parameter that a checkpoint holds and a heal sends (mixed precision with Adam):
# bf16 weights 2 B + fp32 master weights 4 B + fp32 Adam first and second moments 4 + 4 B = 14 B.
# Gradients are not state (recomputed every step). An fp32-only model would be 16 B (4 + 4 + 4 + 4
# with fp32 weights and no separate master), bf16 moments 10 B: hence a parameter.
BYTES_PER_PARAM = 14.0

# lamplighter's own defaults (configs/schema.py; tests/plan checks they still match).
LAMPLIGHTER_HANG_TIMEOUT_S = 30.0  # health.hang_timeout_s: no progress this long is a hang
TORCHFT_PG_TIMEOUT_S = 3.0  # torchft.pg_timeout_s: bounds how long survivors wait on a hung peer
# torch.distributed's default collective timeout (10 min): how long plain DDP/FSDP hangs before it fails.
TORCH_DEFAULT_PG_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ModelSize:
    name: str
    params: float
    group_gpus: int  # a replica group that holds it comfortably (assumption; --group-gpus overrides)


# Llama 3 8B and 70B parameter counts (Meta's model cards). Group sizes: 8B in one 8-GPU node;
# 70B's 0.99 TB of state over 4 nodes (31 GB per GPU with 14 B/param) leaves room for activations.
MODELS = {
    "8b": ModelSize("8b", 8.03e9, 8),
    "70b": ModelSize("70b", 70.6e9, 32),
}


@dataclass(frozen=True)
class Cluster:
    gpus: int = LLAMA3_GPUS
    gpus_per_node: int = 8
    group_gpus: int = 8  # GPUs of one torchft replica group: a fault takes out one group
    failures_per_gpu_s: float = LLAMA3_FAILURES_PER_GPU_S
    hang_share: float = 0.1  # assumption: Llama 3 published causes, not symptoms (hang vs exit)
    nonlocal_share: float = 0.0  # faults one group's restart cannot absorb: a job restart (plan/ranges.py)
    bad_node_share: float = 0.0  # exits that leave their node bad until repaired (a lemon): a restart there fails
    lighthouse_failures_per_s: float = 0.0  # the job's one Lighthouse lost (its host, its process)

    @property
    def groups(self) -> int:
        return self.gpus // self.group_gpus if self.group_gpus > 0 else 0


@dataclass(frozen=True)
class Workload:
    params: float = MODELS["70b"].params
    bytes_per_param: float = BYTES_PER_PARAM

    @property
    def state_bytes(self) -> float:
        return self.params * self.bytes_per_param


@dataclass(frozen=True)
class Costs:
    """The component times. Defaults marked 'assumed' are not measured anywhere: change them."""

    # checkpoint-restart
    ckpt_write_bps: float = 50 * GB  # assumed aggregate write bandwidth of the job to its filesystem
    ckpt_read_bps: float = 50 * GB  # assumed, same
    ckpt_interval_s: float | None = None  # None: Young/Daly; a number: a fixed interval of compute
    job_restart_s: float = 300.0  # assumed: requeue, allocate N GPUs, start, init NCCL ("minutes")
    ckpt_detect_s: float = 1.0  # srun --kill-on-bad-exit: an exit ends the job at once
    ckpt_hang_detect_s: float = TORCH_DEFAULT_PG_TIMEOUT_S  # a hang ends when the collective times out
    # lamplighter (and the poll runner: the same group restart and heal)
    detect_s: float = 1.0  # the node daemon's 1 s poll sees an exit (0.4 s measured in bench/)
    hang_detect_s: float = LAMPLIGHTER_HANG_TIMEOUT_S
    group_restart_s: float = 60.0  # assumed: requeue one group, start, join the quorum (3-4 s on bench/)
    heal_bps_per_gpu: float = 25 * GB  # assumed: half a 400 Gb/s NIC per GPU, each GPU pulls its shard
    stall_s: float = 0.5  # survivors' stall at an exit (bench/results/survivor_stall.json: 0.52 s median)
    hang_stall_s: float = TORCHFT_PG_TIMEOUT_S  # survivors wait on a hung peer until the PG timeout
    stall_per_group_s: float = 0.0  # both stalls grow this much per replica group (bench/stall_groups.py's fit)
    rejoin_stall_s: float = 0.0  # survivors stall again when the group rejoins (torchft's second quorum change)
    step_overhead: float = 0.0  # torchft's per-step throughput loss against plain DDP, a fraction
    fallback_interval_s: float = 300.0  # the fallback checkpoint's interval (trainer.checkpoint.interval_s)
    bad_node_s: float = 5.0  # a bad node to its group running on another (bench/results/hw_fault_path.json)
    queue_wait_s: float = 0.0  # a fresh submission's wait in the queue (bench/results/busy_queue.json)
    lighthouse_out_s: float = 1.0  # a lost Lighthouse to the groups' next commit, restarted by lamplighter
    # poll runner
    poll_s: float = 10.0  # torchft's Slurm example polls squeue every 10 s
    time_limit_s: float = 24 * HOUR  # assumed Slurm time limit of a group's job: a hang holds it till then
    # in-job restart: torchrun --max-restarts inside each group's job, no daemon and no resubmission
    injob_detect_s: float = 0.1  # torchrun's --monitor-interval
    injob_hang_detect_s: float = TORCH_DEFAULT_PG_TIMEOUT_S  # a hang ends when the watchdog's collective times out


@dataclass(frozen=True)
class Result:
    strategy: str
    goodput: float  # fraction of fault-free throughput
    lost_gpu_h_per_day: float
    job_mtbf_h: float  # mean time between faults anywhere in the job (the same for every strategy)
    cost_per_fault_gpu_s: float  # GPU-seconds one average fault costs (excl. checkpoint overhead)
    detail: dict[str, float]


NON_NEGATIVE_COSTS = (
    "job_restart_s",
    "ckpt_detect_s",
    "ckpt_hang_detect_s",
    "detect_s",
    "hang_detect_s",
    "group_restart_s",
    "stall_s",
    "hang_stall_s",
    "stall_per_group_s",
    "rejoin_stall_s",
    "bad_node_s",
    "queue_wait_s",
    "lighthouse_out_s",
    "injob_detect_s",
    "injob_hang_detect_s",
)


def check(cluster: Cluster, work: Workload, costs: Costs) -> list[str]:
    """Each input that makes the model meaningless, as a sentence; empty when all are fine."""
    bad: list[str] = []
    for name, value in [("gpus", cluster.gpus), ("gpus_per_node", cluster.gpus_per_node)]:
        if value <= 0:
            bad.append(f"{name} must be positive, not {value}")
    if cluster.group_gpus <= 0:
        bad.append(f"group_gpus must be positive, not {cluster.group_gpus}")
    elif cluster.gpus > 0 and cluster.gpus % cluster.group_gpus:
        bad.append(f"gpus ({cluster.gpus}) must be a multiple of group_gpus ({cluster.group_gpus})")
    elif cluster.gpus > 0 and cluster.gpus_per_node > 0 and cluster.gpus < 2 * gpus_per_fault(cluster):
        bad.append(
            f"{cluster.gpus} GPUs leave no live replica group to heal from after a fault takes out "
            f"{gpus_per_fault(cluster)} GPUs: give at least {2 * gpus_per_fault(cluster)} GPUs or smaller groups"
        )
    if cluster.failures_per_gpu_s < 0:
        bad.append("the failure rate must not be negative")
    if not 0.0 <= cluster.hang_share <= 1.0:
        bad.append(f"hang_share must be within 0..1, not {cluster.hang_share}")
    if not 0.0 <= cluster.nonlocal_share <= 1.0:
        bad.append(f"nonlocal_share must be within 0..1, not {cluster.nonlocal_share}")
    if not 0.0 <= cluster.bad_node_share <= 1.0:
        bad.append(f"bad_node_share must be within 0..1, not {cluster.bad_node_share}")
    elif cluster.hang_share + cluster.bad_node_share > 1.0 + 1e-12:
        bad.append(
            f"hang_share ({cluster.hang_share}) and bad_node_share ({cluster.bad_node_share}) add up to more than 1"
        )
    if cluster.lighthouse_failures_per_s < 0:
        bad.append("the Lighthouse's failure rate must not be negative")
    if not 0.0 <= costs.step_overhead < 1.0:
        bad.append(f"step_overhead must be within 0..1 (a fraction), not {costs.step_overhead}")
    if work.params <= 0 or work.bytes_per_param <= 0:
        bad.append("params and bytes_per_param must be positive")
    for name in (
        "ckpt_write_bps",
        "ckpt_read_bps",
        "heal_bps_per_gpu",
        "poll_s",
        "time_limit_s",
        "fallback_interval_s",
    ):
        if getattr(costs, name) <= 0:
            bad.append(f"{name} must be positive, not {getattr(costs, name)}")
    for name in NON_NEGATIVE_COSTS:
        if getattr(costs, name) < 0:
            bad.append(f"{name} must not be negative, not {getattr(costs, name)}")
    if costs.ckpt_interval_s is not None and costs.ckpt_interval_s <= 0:
        bad.append(f"ckpt_interval_s must be positive, not {costs.ckpt_interval_s}")
    return bad


def gpus_per_fault(cluster: Cluster) -> int:
    """u = max(g, GPUs per node): a node fault restarts every group on the node, or the one group spanning it."""
    return max(cluster.group_gpus, cluster.gpus_per_node)


def job_failure_rate(cluster: Cluster) -> float:
    """L = N * lam, faults of the whole job per second."""
    return cluster.gpus * cluster.failures_per_gpu_s


def heal_s(cluster: Cluster, work: Workload, costs: Costs) -> float:
    """S / (g * heal bandwidth per GPU): the group's state is sharded over its GPUs, each pulls its shard in parallel."""
    return work.state_bytes / (cluster.group_gpus * costs.heal_bps_per_gpu)


def checkpoint_write_s(work: Workload, costs: Costs) -> float:
    """C = S / write bandwidth: the job blocks while one copy of the state is written."""
    return work.state_bytes / costs.ckpt_write_bps


def young_daly_interval_s(write_s: float, mtbf_s: float) -> float:
    """tau = sqrt(2 * C * M) (Young 1974; Daly 2006 to first order): compute between checkpoints
    that minimises C / tau + (tau / 2) / M. Infinite when nothing fails."""
    return math.sqrt(2.0 * write_s * mtbf_s) if math.isfinite(mtbf_s) else math.inf


def _result(strategy: str, cluster: Cluster, goodput: float, per_fault: float, detail: dict[str, float]) -> Result:
    goodput = min(1.0, max(0.0, goodput))
    rate = job_failure_rate(cluster)
    mtbf_h = 1.0 / rate / HOUR if rate > 0 else math.inf
    lost = (1.0 - goodput) * cluster.gpus * 24.0
    return Result(strategy, goodput, lost, mtbf_h, per_fault, detail)


def groups_goodput(cluster: Cluster, out_s: float, stall_s: float) -> tuple[float, float]:
    """(goodput, available) when each fault takes its unit out for out_s and stalls every other unit stall_s.

    A unit of u GPUs fails at rate u*lam while it runs and is out for out_s (the mean over kinds): it runs a
    share A = 1 / (1 + u*lam*out_s) of the time. The other units fail at (N - u)*lam*A, each fault
    stalling this one for stall_s (the mean); stalls are Poisson, so a moment is free of every stall with
    probability exp(-(N - u)*lam*A*stall_s), whatever their overlaps. goodput = A * that probability.
    """
    lam, u, n = cluster.failures_per_gpu_s, gpus_per_fault(cluster), cluster.gpus
    available = 1.0 / (1.0 + u * lam * out_s)
    return available * math.exp(-(n - u) * lam * available * stall_s), available


def stalls(cluster: Cluster, costs: Costs) -> float:
    """Survivors' stall per fault, the mean over kinds, at this many groups: at the fault, then at the rejoin."""
    h, grow = cluster.hang_share, costs.stall_per_group_s * cluster.groups
    return (1 - h) * costs.stall_s + h * costs.hang_stall_s + grow + costs.rejoin_stall_s


def job_outage_s(cluster: Cluster, work: Workload, costs: Costs) -> float:
    """A fault no group restart absorbs, for a torchft strategy: the whole job back from its fallback checkpoint."""
    h = cluster.hang_share
    detect = (1 - h) * costs.ckpt_detect_s + h * costs.ckpt_hang_detect_s
    return detect + costs.job_restart_s + work.state_bytes / costs.ckpt_read_bps + costs.fallback_interval_s / 2


def by_kind(cluster: Cluster, exit_s: float, hang_s: float, bad_node_s: float) -> float:
    """The mean over the kinds of local fault: exits, hangs and exits that leave their node bad."""
    h, b = cluster.hang_share, cluster.bad_node_share
    return (1 - h - b) * exit_s + h * hang_s + b * bad_node_s


def torchft_goodput(
    strategy: str,
    cluster: Cluster,
    work: Workload,
    costs: Costs,
    out_s: float,
    lighthouse_out_s: float,
    detail: dict[str, float],
) -> Result:
    """The composition the torchft strategies share: local faults take their group out for out_s and stall the
    others; non-local ones take the job down (job_outage_s), and so does a lost Lighthouse, for lighthouse_out_s;
    every step pays torchft's overhead."""
    lam, nl, n, u = cluster.failures_per_gpu_s, cluster.nonlocal_share, cluster.gpus, gpus_per_fault(cluster)
    stall = stalls(cluster, costs)
    local, available = groups_goodput(replace(cluster, failures_per_gpu_s=lam * (1 - nl)), out_s, stall)
    outage = job_outage_s(cluster, work, costs)
    lh = cluster.lighthouse_failures_per_s
    job_up = 1.0 / (1.0 + n * lam * nl * outage + lh * lighthouse_out_s)
    goodput = (1.0 - costs.step_overhead) * local * job_up
    per_fault = (1 - nl) * (u * out_s + (n - u) * stall) + nl * n * outage  # the failed GPUs' stall is in out_s
    detail = {
        **detail,
        "stall_s": stall,
        "available": available,
        "job_outage_s": outage,
        "lighthouse_out_s": lighthouse_out_s,
        "job_up": job_up,
    }
    return _result(strategy, cluster, goodput, per_fault, detail)


def until_time_limit_s(costs: Costs) -> float:
    """T / 2: a fault nothing repairs holds what it struck until the job's time limit, on average half of it away
    (faults uniform in a job's life)."""
    return costs.time_limit_s / 2


def lamplighter(cluster: Cluster, work: Workload, costs: Costs) -> Result:
    """A fault takes the u GPUs of its unit out until the group trains again, and stalls every survivor.

    out = restart + heal after the detection of its kind: an exit d_exit, a hang d_hang (the hang timeout), a bad
    node the requeue onto another node (bad_node_s) and the queue's wait; restart = r_g (detected to first commit,
    heal aside), heal = S / (g * b_heal). The stall per fault s = (1-h) s_exit + h s_hang + k R + s_rejoin (k: its
    growth per group, R groups; s_rejoin: the second quorum change when the group comes back); a lost Lighthouse
    is restarted (lighthouse_out_s). goodput = (1 - overhead) * groups_goodput(out, s) at the rate of the faults
    a group restart absorbs, times the share of time the job is up despite the others (torchft_goodput). The
    heal's sender is taken as free (torchft sends from a live peer while it trains).
    """
    heal = heal_s(cluster, work, costs)
    back = costs.group_restart_s + heal
    exit_s, hang_s = costs.detect_s + back, costs.hang_detect_s + back
    bad_s = costs.bad_node_s + costs.queue_wait_s + back
    out_s = by_kind(cluster, exit_s, hang_s, bad_s)
    detail = {"group_out_s": out_s, "exit_out_s": exit_s, "hang_out_s": hang_s, "bad_node_out_s": bad_s}
    return torchft_goodput(
        "lamplighter",
        cluster,
        work,
        costs,
        out_s,
        costs.lighthouse_out_s,
        {**detail, "heal_s": heal},
    )


def checkpoint_restart(cluster: Cluster, work: Workload, costs: Costs) -> Result:
    """Every fault stops all N GPUs; the job checkpoints every tau seconds of compute.

    The job runs until a fault (exponential, mean M = 1/L), then is down D = d + r_job + S / b_read, with
    d = (1-h) d_exit + h d_hang (a hang holds the job until the collective times out). While it runs it
    computes tau, writes C = S / b_write, and so on; a fault loses the work since the last checkpoint. A
    run of length T keeps floor(T / (tau + C)) * tau, whose mean is tau * q / (1 - q), q = exp(-(tau + C) / M):
    goodput = tau * q / ((1 - q) * (M + D)). For C << tau << M this is Young's first-order
    1 - C / tau - (D + tau / 2) / M, and tau = sqrt(2 C M) (or the fixed interval) is its optimum. A bad node is
    taken as left out of the job's next allocation, and there is no Lighthouse to lose.
    """
    rate = job_failure_rate(cluster)
    write = checkpoint_write_s(work, costs)
    read = work.state_bytes / costs.ckpt_read_bps
    mtbf = 1.0 / rate if rate > 0 else math.inf
    tau = costs.ckpt_interval_s if costs.ckpt_interval_s is not None else young_daly_interval_s(write, mtbf)
    h = cluster.hang_share
    detect = (1 - h) * costs.ckpt_detect_s + h * costs.ckpt_hang_detect_s
    down_s = detect + costs.job_restart_s + read
    if not math.isfinite(mtbf):
        goodput = tau / (tau + write) if math.isfinite(tau) else 1.0
    else:
        q = math.exp(-(tau + write) / mtbf)
        goodput = tau * q / ((1.0 - q) * (mtbf + down_s)) if q < 1.0 else 0.0
    overhead = write / (tau + write) if math.isfinite(tau) else 0.0
    rollback = tau / 2 if math.isfinite(tau) else 0.0
    detail = {
        "checkpoint_s": write,
        "interval_s": tau,
        "read_s": read,
        "job_down_s": down_s + rollback,
        "overhead": overhead,
    }
    return _result("ckpt-restart", cluster, goodput, cluster.gpus * (down_s + rollback), detail)


def poll_runner(cluster: Cluster, work: Workload, costs: Costs) -> Result:
    """torchft's Slurm runner: a group's job that has ended is resubmitted at the next poll; nothing else.

    An exit (a bad node's too: its job fails, and the new one is taken as landing elsewhere): the next poll, on
    average p / 2 later, resubmits it, which waits in the queue: out p/2 + wait + r_g + heal. A hang: the job stays
    RUNNING, holding its GPUs until its time limit (until_time_limit_s), then as an exit. A lost Lighthouse is
    not restarted (the runner does not start it): every group is out until the time limit. The stalls, the
    non-local faults and the overhead as lamplighter's (torchft_goodput).
    """
    heal = heal_s(cluster, work, costs)
    back_s = costs.poll_s / 2 + costs.queue_wait_s + costs.group_restart_s + heal
    hang_out = until_time_limit_s(costs) + back_s
    out_s = by_kind(cluster, back_s, hang_out, back_s)
    detail = {"exit_out_s": back_s, "hang_out_s": hang_out, "bad_node_out_s": back_s, "heal_s": heal}
    return torchft_goodput(f"poll-{costs.poll_s:g}s", cluster, work, costs, out_s, until_time_limit_s(costs), detail)


def in_job_restart(cluster: Cluster, work: Workload, costs: Costs) -> Result:
    """torchrun --max-restarts inside each group's job, submitted once, with no daemon (NVRx's ft_launcher or
    plain torchrun users): the restart stays on the group's nodes.

    An exit: torchrun sees it (injob_detect_s) and restarts the group in its allocation: out d + r_g + heal. A
    hang: nothing watches progress; the collective's watchdog ends the process (injob_hang_detect_s), then as an
    exit. A bad node: every restart fails on it until --max-restarts is spent, the job ends and nothing resubmits
    it: the group is out until the time limit (until_time_limit_s). A lost Lighthouse is not restarted: every
    group out until the time limit. The stalls, the non-local faults and the overhead as lamplighter's.
    """
    heal = heal_s(cluster, work, costs)
    back = costs.group_restart_s + heal
    exit_s, hang_s = costs.injob_detect_s + back, costs.injob_hang_detect_s + back
    bad_s = until_time_limit_s(costs)
    out_s = by_kind(cluster, exit_s, hang_s, bad_s)
    detail = {"exit_out_s": exit_s, "hang_out_s": hang_s, "bad_node_out_s": bad_s, "heal_s": heal}
    return torchft_goodput("in-job-restart", cluster, work, costs, out_s, until_time_limit_s(costs), detail)


def replay(
    groups: int,
    faults: Sequence[tuple[float, int, str]],
    start: float,
    end: float,
    out_s: Mapping[str, float],
    stall_s: Mapping[str, float],
) -> float:
    """The share of group-seconds in [start, end] that train, for faults at known times.

    Each fault (time, group, kind) takes its group out for out_s[kind] and stalls every other group for
    stall_s[kind]; a group trains when no window covers it (the composition rule of the closed forms above,
    applied to recorded or simulated fault times instead of a rate). A fault that strikes a group already
    out replaces what was there: its earlier window ends at that fault, and the new one starts (a kill that
    hits a hung process the strategy never repairs ends the hang: the kill's restart brings the group back).
    """
    if end <= start or groups <= 0:
        raise ValueError(f"replay needs a positive span and groups, not [{start}, {end}] and {groups}")
    lost = 0.0
    for g in range(groups):
        own = sorted((t, kind) for t, who, kind in faults if who == g)
        spans = [(t, t + stall_s[kind]) for t, who, kind in faults if who != g]
        for i, (t, kind) in enumerate(own):
            until = own[i + 1][0] if i + 1 < len(own) else math.inf
            spans.append((t, min(t + out_s[kind], until)))
        lost += covered(spans, start, end)
    return 1.0 - lost / (groups * (end - start))


def covered(spans: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of [start, end] inside at least one span: overlapping spans count once."""
    total, reached = 0.0, start
    for a, b in sorted(spans):
        a, b = max(a, reached), min(b, end)
        if b > a:
            total, reached = total + b - a, b
    return total


STRATEGIES = (lamplighter, checkpoint_restart, poll_runner, in_job_restart)


def compare(cluster: Cluster, work: Workload, costs: Costs) -> list[Result]:
    """The strategies on the same inputs; raises ValueError naming every bad input."""
    bad = check(cluster, work, costs)
    if bad:
        raise ValueError("; ".join(bad))
    return [strategy(cluster, work, costs) for strategy in STRATEGIES]


def sweep(cluster: Cluster, work: Workload, costs: Costs, sizes: list[int]) -> dict[int, list[Result]]:
    """compare() at each cluster size that leaves two groups and is a multiple of the group size."""
    out: dict[int, list[Result]] = {}
    for n in sizes:
        sized = replace(cluster, gpus=n)
        if not check(sized, work, costs):
            out[n] = compare(sized, work, costs)
    return out


SWEEP_SIZES = [64 * 2**k for k in range(9)]  # 64 .. 16384 GPUs
