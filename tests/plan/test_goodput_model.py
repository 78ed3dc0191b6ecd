"""The goodput model's formulas: properties that would break if a term were wrong (pure, no clock)."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lamplighter.configs.schema import HealthConfig, TorchftConfig
from lamplighter.plan import goodput_model as gm

CLUSTER = gm.Cluster(gpus=1024, group_gpus=8)
WORK = gm.Workload(params=gm.MODELS["8b"].params)
COSTS = gm.Costs()


def by_name(results: list[gm.Result]) -> dict[str, gm.Result]:
    return {r.strategy: r for r in results}


def test_llama3_rate_gives_its_published_mtbf_at_16k_gpus() -> None:
    r = gm.lamplighter(replace(CLUSTER, gpus=16_384), WORK, COSTS)
    assert r.job_mtbf_h == pytest.approx(54 * 24 / 419)


def test_defaults_that_mirror_lamplighter_config_still_match_it() -> None:
    assert HealthConfig.model_fields["hang_timeout_s"].default == gm.LAMPLIGHTER_HANG_TIMEOUT_S
    assert TorchftConfig.model_fields["pg_timeout_s"].default == gm.TORCHFT_PG_TIMEOUT_S


def test_young_daly_interval_on_a_worked_example() -> None:
    # 1 TB of state at 50 GB/s: C = 20 s. 1000 GPUs at 1e-7 failures per GPU-second: M = 10,000 s.
    work = gm.Workload(params=1e12, bytes_per_param=1.0)
    cluster = gm.Cluster(gpus=1000, gpus_per_node=8, group_gpus=8, failures_per_gpu_s=1e-7, hang_share=0.0)
    costs = replace(COSTS, ckpt_write_bps=50e9)
    r = gm.checkpoint_restart(cluster, work, costs)
    assert r.detail["checkpoint_s"] == pytest.approx(20.0)
    assert r.detail["interval_s"] == pytest.approx(math.sqrt(2 * 20.0 * 10_000.0))  # 632.46 s
    assert gm.young_daly_interval_s(20.0, 10_000.0) == pytest.approx(632.4555, rel=1e-6)
    tau, down = r.detail["interval_s"], costs.ckpt_detect_s + costs.job_restart_s + 1e12 / costs.ckpt_read_bps
    q = math.exp(-(tau + 20.0) / 10_000.0)
    assert r.goodput == pytest.approx(tau * q / ((1 - q) * (10_000.0 + down)))  # 0.9089
    # ... within half a point of Young's first order, 1 - C/tau - (D + tau/2) / M = 0.9047, as C << tau << M.
    assert r.goodput == pytest.approx(1 - 20.0 / tau - (down + tau / 2) / 10_000.0, abs=0.005)


def test_young_daly_interval_minimises_the_checkpoint_restart_loss() -> None:
    cluster = replace(CLUSTER, gpus=16_384)
    best = gm.checkpoint_restart(cluster, WORK, COSTS)
    tau = best.detail["interval_s"]
    for factor in (0.5, 0.8, 1.25, 2.0):
        other = gm.checkpoint_restart(cluster, WORK, replace(COSTS, ckpt_interval_s=tau * factor))
        assert other.goodput < best.goodput


def test_zero_failure_rate_leaves_only_the_checkpoint_overhead() -> None:
    calm = replace(CLUSTER, failures_per_gpu_s=0.0)
    fixed = gm.checkpoint_restart(calm, WORK, replace(COSTS, ckpt_interval_s=600.0))
    write = WORK.state_bytes / COSTS.ckpt_write_bps
    assert fixed.goodput == pytest.approx(600.0 / (600.0 + write))  # compute 600 s, then write
    assert fixed.lost_gpu_h_per_day == pytest.approx(write / (600.0 + write) * calm.gpus * 24)
    # Young/Daly with nothing failing never checkpoints; the others lose nothing.
    results = gm.compare(calm, WORK, COSTS)
    assert [r.goodput for r in results] == [1.0] * len(gm.STRATEGIES)
    assert math.isinf(results[0].job_mtbf_h)


@pytest.mark.parametrize("model", sorted(gm.MODELS))
def test_goodput_falls_as_the_cluster_grows(model: str) -> None:
    preset = gm.MODELS[model]
    cluster = replace(CLUSTER, group_gpus=preset.group_gpus)
    swept = gm.sweep(cluster, gm.Workload(params=preset.params), COSTS, gm.SWEEP_SIZES)
    assert list(swept) == gm.SWEEP_SIZES  # 64 GPUs already hold two groups of either model
    for i in range(3):
        series = [swept[n][i].goodput for n in sorted(swept)]
        assert all(a > b for a, b in itertools.pairwise(series)), (swept[64][i].strategy, series)
        lost = [swept[n][i].lost_gpu_h_per_day for n in sorted(swept)]
        assert all(a < b for a, b in itertools.pairwise(lost))


def test_lost_gpu_hours_per_day_is_the_lost_fraction_of_all_gpu_hours() -> None:
    for r in gm.compare(CLUSTER, WORK, COSTS):
        assert r.lost_gpu_h_per_day == pytest.approx((1 - r.goodput) * CLUSTER.gpus * 24)


@given(
    gpus_log2=st.integers(4, 14),
    rate=st.floats(1e-9, 1e-5),
    hang_share=st.floats(0.0, 1.0),
    group_restart=st.floats(0.0, 600.0),
    extra=st.floats(0.0, 600.0),
    heal_gbs=st.floats(1.0, 100.0),
)
def test_lamplighter_beats_checkpoint_restart_when_its_recovery_is_shorter(
    gpus_log2: int, rate: float, hang_share: float, group_restart: float, extra: float, heal_gbs: float
) -> None:
    cluster = gm.Cluster(
        gpus=2**gpus_log2, gpus_per_node=8, group_gpus=8, failures_per_gpu_s=rate, hang_share=hang_share
    )
    costs = replace(COSTS, group_restart_s=group_restart, heal_bps_per_gpu=heal_gbs * gm.GB)
    out = gm.lamplighter(cluster, WORK, costs).detail["group_out_s"]
    # The whole job's restart at least as long as a group's detect + restart + heal.
    costs = replace(costs, job_restart_s=out + extra, ckpt_detect_s=0.0, ckpt_hang_detect_s=0.0)
    ll, ck = gm.lamplighter(cluster, WORK, costs), gm.checkpoint_restart(cluster, WORK, costs)
    assert ll.goodput >= ck.goodput
    assert ll.cost_per_fault_gpu_s <= ck.cost_per_fault_gpu_s


def test_a_fault_costs_lamplighter_one_group_and_checkpoint_restart_the_job() -> None:
    one = replace(CLUSTER, hang_share=0.0)
    ll = gm.lamplighter(one, WORK, COSTS)
    heal = WORK.state_bytes / (8 * COSTS.heal_bps_per_gpu)
    assert ll.detail["group_out_s"] == pytest.approx(COSTS.detect_s + COSTS.group_restart_s + heal)
    assert ll.cost_per_fault_gpu_s == pytest.approx(8 * ll.detail["group_out_s"] + (1024 - 8) * COSTS.stall_s)
    ck = gm.checkpoint_restart(one, WORK, COSTS)
    assert ck.cost_per_fault_gpu_s == pytest.approx(1024 * ck.detail["job_down_s"])


def test_groups_smaller_than_a_node_all_go_down_with_it() -> None:
    small = replace(CLUSTER, group_gpus=2, hang_share=0.0)
    assert gm.gpus_per_fault(small) == 8
    ll = gm.lamplighter(small, WORK, COSTS)
    assert ll.cost_per_fault_gpu_s == pytest.approx(8 * ll.detail["group_out_s"] + (1024 - 8) * COSTS.stall_s)


def test_poll_runner_is_lamplighter_with_half_a_poll_to_detect_when_nothing_hangs() -> None:
    exits = replace(CLUSTER, hang_share=0.0)
    poll = gm.poll_runner(exits, WORK, COSTS)
    same = gm.lamplighter(exits, WORK, replace(COSTS, detect_s=COSTS.poll_s / 2))
    assert poll.goodput == pytest.approx(same.goodput)
    assert poll.strategy == "poll-10s"


def test_poll_runner_hangs_cost_half_the_time_limit_and_worse_with_a_longer_one() -> None:
    hangs = replace(CLUSTER, hang_share=1.0)
    short = gm.poll_runner(hangs, WORK, replace(COSTS, time_limit_s=3600.0))
    long = gm.poll_runner(hangs, WORK, replace(COSTS, time_limit_s=48 * 3600.0))
    assert short.detail["hang_out_s"] == pytest.approx(
        1800 + COSTS.poll_s / 2 + COSTS.group_restart_s + short.detail["heal_s"]
    )
    assert long.goodput < short.goodput < gm.lamplighter(hangs, WORK, COSTS).goodput


def test_a_storm_of_faults_leaves_goodput_near_zero_never_below() -> None:
    stormy = replace(CLUSTER, failures_per_gpu_s=1e-3)  # a fault per second against 5-minute restarts
    assert all(0.0 <= r.goodput <= 1.0 for r in gm.compare(stormy, WORK, COSTS))
    ck, ll = gm.checkpoint_restart(stormy, WORK, COSTS), gm.lamplighter(stormy, WORK, COSTS)
    assert ck.goodput < 1e-3 < ll.goodput  # the job never runs long enough to checkpoint; groups do train


def test_replay_counts_overlapping_windows_once() -> None:
    # Group 0 out 0-4 s (a kill), group 1 out 2-6 s (a kill), each stalling the others 1 s; a hang of
    # group 2 at 8 s: out past the end (10 s), the others stalled 3 s, to the end. Lost: group 0 0-4 and
    # 8-10 (6 s), group 1 0-1, 2-6 and 8-10 (7 s), group 2 0-1, 2-3 and 8-10 (4 s): 17 of 30 group-seconds.
    faults = [(0.0, 0, "kill"), (2.0, 1, "kill"), (8.0, 2, "hang")]
    got = gm.replay(3, faults, 0.0, 10.0, {"kill": 4.0, "hang": 9.0}, {"kill": 1.0, "hang": 3.0})
    assert got == pytest.approx(1 - 17 / 30)


def poisson_faults(
    rng: random.Random, units: int, rate: float, hang_share: float, out_s: dict[str, float], horizon: float
) -> list[tuple[float, int, str]]:
    """Each unit fails at `rate` while it runs and is out for out_s[kind] after each fault."""
    faults = []
    for unit in range(units):
        t = rng.expovariate(rate)
        while t < horizon:
            kind = "hang" if rng.random() < hang_share else "kill"
            faults.append((t, unit, kind))
            t += out_s[kind] + rng.expovariate(rate)
    return faults


@pytest.mark.parametrize(("rate", "hang_share"), [(1e-3, 0.0), (0.02, 0.3), (0.1, 0.5)])
def test_lamplighters_closed_form_matches_replaying_poisson_faults(rate: float, hang_share: float) -> None:
    # From rare faults to the benchmark's density (a group out a third of the time): the closed form
    # must agree with the composition rule applied to simulated faults, or the plan's numbers are not it.
    cluster = gm.Cluster(gpus=6, gpus_per_node=1, group_gpus=1, failures_per_gpu_s=rate, hang_share=hang_share)
    costs = replace(COSTS, detect_s=0.3, hang_detect_s=5.0, group_restart_s=1.2, stall_s=0.6, hang_stall_s=3.0)
    work = gm.Workload(params=1.0, bytes_per_param=1.0)
    model = gm.lamplighter(cluster, work, costs)
    out = {"kill": 0.3 + 1.2 + model.detail["heal_s"], "hang": 5.0 + 1.2 + model.detail["heal_s"]}
    horizon = 200.0 / rate
    faults = poisson_faults(random.Random(7), cluster.gpus, rate, hang_share, out, horizon)
    replayed = gm.replay(cluster.gpus, faults, 0.0, horizon, out, {"kill": 0.6, "hang": 3.0})
    assert model.goodput == pytest.approx(replayed, abs=0.02)


@pytest.mark.parametrize("mtbf", [50.0, 10.0, 3.0])
def test_checkpoint_restarts_closed_form_matches_a_simulated_job(mtbf: float) -> None:
    cluster = gm.Cluster(gpus=8, gpus_per_node=8, group_gpus=8, failures_per_gpu_s=1 / (8 * mtbf), hang_share=0.0)
    costs = replace(COSTS, ckpt_write_bps=1.0, ckpt_read_bps=math.inf, job_restart_s=4.0, ckpt_detect_s=0.5)
    work = gm.Workload(params=0.2, bytes_per_param=1.0)  # C = 0.2 s
    model = gm.checkpoint_restart(cluster, work, costs)
    tau, rng, t, useful = model.detail["interval_s"], random.Random(3), 0.0, 0.0
    while t < 20_000 * mtbf:
        run = rng.expovariate(1 / mtbf)
        useful += math.floor(run / (tau + 0.2)) * tau  # the work up to the last checkpoint is kept
        t += run + 4.5
    assert model.goodput == pytest.approx(useful / t, abs=0.01)


@pytest.mark.parametrize(
    ("cluster", "costs", "needle"),
    [
        (replace(CLUSTER, gpus=0), COSTS, "gpus must be positive"),
        (replace(CLUSTER, gpus=100), COSTS, "multiple of group_gpus"),
        (replace(CLUSTER, gpus=8), COSTS, "no live replica group"),
        (replace(CLUSTER, group_gpus=0), COSTS, "group_gpus must be positive"),
        (replace(CLUSTER, failures_per_gpu_s=-1.0), COSTS, "not be negative"),
        (replace(CLUSTER, hang_share=1.5), COSTS, "hang_share"),
        (CLUSTER, replace(COSTS, ckpt_write_bps=0.0), "ckpt_write_bps"),
        (CLUSTER, replace(COSTS, job_restart_s=-1.0), "job_restart_s"),
        (CLUSTER, replace(COSTS, ckpt_interval_s=0.0), "ckpt_interval_s"),
    ],
)
def test_bad_inputs_are_named(cluster: gm.Cluster, costs: gm.Costs, needle: str) -> None:
    assert any(needle in problem for problem in gm.check(cluster, WORK, costs))
    with pytest.raises(ValueError, match=needle):
        gm.compare(cluster, WORK, costs)


def test_state_bytes_follow_the_stated_assumption() -> None:
    assert gm.BYTES_PER_PARAM == 2 + 4 + 4 + 4  # bf16 weights, fp32 master, Adam m and v
    assert gm.Workload(params=8e9).state_bytes == pytest.approx(112e9)


def test_a_fault_on_a_group_already_out_replaces_its_window() -> None:
    # Group 0 hangs at 1 s and is never repaired (out to the end) until a kill strikes the hung process at
    # 5 s: the kill's restart brings it back at 7 s. Lost: group 0 1-7 (6 s); group 1 stalled 1-2 and 5-5.5.
    faults = [(1.0, 0, "hang"), (5.0, 0, "kill")]
    got = gm.replay(2, faults, 0.0, 10.0, {"kill": 2.0, "hang": math.inf}, {"kill": 0.5, "hang": 1.0})
    assert got == pytest.approx(1 - 7.5 / 20)
    # A kill then a hang: the hang that strikes the restarting group holds it to the end.
    faults = [(1.0, 0, "kill"), (2.0, 0, "hang")]
    got = gm.replay(2, faults, 0.0, 10.0, {"kill": 4.0, "hang": math.inf}, {"kill": 0.5, "hang": 1.0})
    assert got == pytest.approx(1 - (9.0 + 1.5) / 20)


def only(kind: str) -> gm.Cluster:
    """Every fault of one kind: an exit, a hang, or an exit that leaves its node bad."""
    return replace(CLUSTER, hang_share=1.0 if kind == "hang" else 0.0, bad_node_share=1.0 if kind == "bad" else 0.0)


def test_each_strategy_repairs_each_kind_its_own_way() -> None:
    costs = replace(COSTS, queue_wait_s=50.0, bad_node_s=2.5, time_limit_s=24 * gm.HOUR)
    back = costs.group_restart_s + gm.heal_s(CLUSTER, WORK, costs)
    half_limit, resubmit = 12 * gm.HOUR, costs.poll_s / 2 + 50.0 + back
    for kind, lamp, poll, injob in (
        ("exit", costs.detect_s + back, resubmit, costs.injob_detect_s + back),
        ("hang", costs.hang_detect_s + back, half_limit + resubmit, 600.0 + back),
        # lamplighter requeues off the bad node (and waits in the queue); in-job restarts fail there until the
        # job ends, and nothing resubmits it; the poll runner resubmits it as an exit.
        ("bad", 2.5 + 50.0 + back, resubmit, half_limit),
    ):
        c = only(kind)
        assert gm.lamplighter(c, WORK, costs).detail["group_out_s"] == pytest.approx(lamp), kind
        key = {"exit": "exit_out_s", "hang": "hang_out_s", "bad": "bad_node_out_s"}[kind]
        assert gm.poll_runner(c, WORK, costs).detail[key] == pytest.approx(poll), kind
        assert gm.in_job_restart(c, WORK, costs).detail[key] == pytest.approx(injob), kind


def test_a_lemon_node_costs_in_job_restart_more_the_longer_the_time_limit_and_lamplighter_nothing_more() -> None:
    c = replace(CLUSTER, bad_node_share=0.4)
    short, long = replace(COSTS, time_limit_s=4 * gm.HOUR), replace(COSTS, time_limit_s=72 * gm.HOUR)
    assert gm.in_job_restart(c, WORK, long).goodput < gm.in_job_restart(c, WORK, short).goodput
    assert gm.lamplighter(c, WORK, long).goodput == gm.lamplighter(c, WORK, short).goodput


def test_a_lost_lighthouse_is_restarted_by_lamplighter_and_ends_the_baselines_torchft() -> None:
    calm = replace(CLUSTER, failures_per_gpu_s=0.0)
    lost = replace(calm, lighthouse_failures_per_s=1 / gm.DAY)
    costs = replace(COSTS, lighthouse_out_s=2.0)
    assert gm.lamplighter(lost, WORK, costs).goodput == pytest.approx(1 / (1 + 2.0 / gm.DAY))
    for strategy in (gm.poll_runner, gm.in_job_restart):
        r = strategy(lost, WORK, costs)
        assert r.detail["lighthouse_out_s"] == costs.time_limit_s / 2
        assert r.goodput == pytest.approx(1 / (1 + costs.time_limit_s / 2 / gm.DAY))
    assert gm.checkpoint_restart(lost, WORK, costs).goodput == 1.0  # no Lighthouse to lose


def test_shares_of_kinds_that_add_up_to_more_than_one_are_refused() -> None:
    bad = gm.check(replace(CLUSTER, hang_share=0.7, bad_node_share=0.5), WORK, COSTS)
    assert any("add up to more than 1" in b for b in bad)
    assert gm.check(replace(CLUSTER, hang_share=0.5, bad_node_share=0.5), WORK, COSTS) == []
    assert any("Lighthouse" in b for b in gm.check(replace(CLUSTER, lighthouse_failures_per_s=-1.0), WORK, COSTS))
