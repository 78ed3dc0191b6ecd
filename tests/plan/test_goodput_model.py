"""The goodput model's formulas: properties that would break if a term were wrong (pure, no clock)."""

from __future__ import annotations

import itertools
import math
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
    # goodput = 1 - C/tau - (detect + restart + read + tau/2) / M
    down = costs.ckpt_detect_s + costs.job_restart_s + 1e12 / costs.ckpt_read_bps + r.detail["interval_s"] / 2
    assert r.goodput == pytest.approx(1 - 20.0 / r.detail["interval_s"] - down / 10_000.0)


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
    assert fixed.goodput == pytest.approx(1 - write / 600.0)
    assert fixed.lost_gpu_h_per_day == pytest.approx(write / 600.0 * calm.gpus * 24)
    # Young/Daly with nothing failing never checkpoints; the others lose nothing.
    results = gm.compare(calm, WORK, COSTS)
    assert [r.goodput for r in results] == [1.0, 1.0, 1.0]
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


def test_goodput_is_floored_at_zero() -> None:
    stormy = replace(CLUSTER, failures_per_gpu_s=1e-3)
    assert all(0.0 <= r.goodput <= 1.0 for r in gm.compare(stormy, WORK, COSTS))
    assert gm.checkpoint_restart(stormy, WORK, COSTS).goodput == 0.0


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
