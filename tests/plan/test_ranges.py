"""The plan's honest ranges and the model terms they move (pure): what would break if a term were wrong."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lamplighter.plan import goodput_model as gm
from lamplighter.plan import measured as ms
from lamplighter.plan import ranges as rg

CLUSTER = gm.Cluster(gpus=16_384, group_gpus=32)
WORK = gm.Workload(params=gm.MODELS["70b"].params)
COSTS = gm.Costs()


def goodputs(by: dict[str, tuple[gm.Cluster, gm.Costs, list[gm.Result]]], name: str) -> list[float]:
    return [next(r for r in by[s][2] if r.strategy == name).goodput for s in rg.SCENARIOS]


@pytest.mark.parametrize(("gpus", "model"), [(1024, "8b"), (1024, "70b"), (16_384, "8b"), (16_384, "70b")])
def test_every_strategy_is_lowest_when_every_assumption_is_pessimistic(gpus: int, model: str) -> None:
    preset = gm.MODELS[model]
    by = rg.ranges(gm.Cluster(gpus=gpus, group_gpus=preset.group_gpus), gm.Workload(params=preset.params), COSTS, {})
    for name in ("lamplighter", "ckpt-restart", "poll-10s"):
        low, central, high = goodputs(by, name)
        assert 0 < low <= central <= high <= 1, (name, low, central, high)


def test_a_pinned_input_is_the_same_in_every_scenario_and_the_others_vary() -> None:
    by = rg.ranges(CLUSTER, WORK, COSTS, {"stall_s": 12.0})
    assert {by[s][1].stall_s for s in rg.SCENARIOS} == {12.0}
    assert len({by[s][1].job_restart_s for s in rg.SCENARIOS}) == 3
    rows = dict(rg.assumption_rows(CLUSTER, {"stall_s": 12.0}))
    assert rows["survivors' stall when a group fails"] == ["12 s (given)"] * 3


def test_the_central_stall_is_ft_hsdps_scaled_by_gpus_and_never_below_the_measured_grown() -> None:
    m = ms.snapshot()
    stall = next(a for a in rg.ASSUMPTIONS if a.key == "stall_s")
    at = {n: [v(replace(CLUSTER, gpus=n), m) for v in stall.values] for n in (256, 16_384, 131_072)}
    assert at[131_072][1] == rg.FT_HSDP_STALL_S  # beyond FT-HSDP's size: its figure
    assert at[16_384][1] == pytest.approx(rg.FT_HSDP_STALL_S * 16_384 / rg.FT_HSDP_GPUS)
    # 8 groups: FT-HSDP scaled down (0.46 s) is less than this machine measured, grown by 8 groups' quorums.
    grown = m["stall_s"].central + m["quorum_per_group_s"].central * 8
    assert at[256][1] == pytest.approx(grown)
    assert at[256][2] == pytest.approx(m["stall_s"].high + m["quorum_per_group_s"].high * 8)


def test_every_measured_input_is_read_from_the_measurements_given() -> None:
    """A measured input moves with its file: doubling each one's values changes the scenario's input (on two
    groups, where no published figure scaled by GPUs outweighs the measured)."""
    m, small = ms.snapshot(), gm.Cluster(gpus=16, group_gpus=8)
    doubled = {k: replace(x, low=2 * x.low, central=2 * x.central, high=2 * x.high) for k, x in m.items()}
    for a in rg.ASSUMPTIONS:
        if not a.measured:
            continue
        moved = [i for i in range(3) if a.values[i](small, doubled) != a.values[i](small, m)]
        # The pessimistic stalls are FT-HSDP's published figure, torchft's per-step cost is assumed but at its
        # optimistic end; every other value reads its measurement.
        expect = {"step_overhead": [2]}.get(a.key, [1, 2] if a.key.endswith("stall_s") else [0, 1, 2])
        assert moved == expect, a.key


def test_torchfts_per_step_cost_is_paid_when_nothing_fails_and_checkpoint_restart_does_not_pay_it() -> None:
    calm = replace(CLUSTER, failures_per_gpu_s=0.0)
    costs = replace(COSTS, step_overhead=0.03)
    assert gm.lamplighter(calm, WORK, costs).goodput == pytest.approx(0.97)
    assert gm.poll_runner(calm, WORK, costs).goodput == pytest.approx(0.97)
    assert gm.checkpoint_restart(calm, WORK, costs).goodput == gm.checkpoint_restart(calm, WORK, COSTS).goodput


def test_a_fault_no_group_restart_absorbs_costs_the_torchft_strategies_a_job_restart_from_the_fallback() -> None:
    exits = replace(CLUSTER, hang_share=0.0)
    every = replace(exits, nonlocal_share=1.0)
    r = gm.lamplighter(every, WORK, COSTS)
    outage = (
        COSTS.ckpt_detect_s
        + COSTS.job_restart_s
        + WORK.state_bytes / COSTS.ckpt_read_bps
        + COSTS.fallback_interval_s / 2
    )
    assert r.detail["job_outage_s"] == pytest.approx(outage)
    assert r.cost_per_fault_gpu_s == pytest.approx(every.gpus * outage)
    rate = every.gpus * every.failures_per_gpu_s
    assert r.goodput == pytest.approx(1 / (1 + rate * outage))
    assert (
        gm.lamplighter(replace(exits, nonlocal_share=0.2), WORK, COSTS).goodput
        < gm.lamplighter(exits, WORK, COSTS).goodput
    )


def test_the_stall_grows_with_the_groups_and_the_rejoin_adds_a_second_one() -> None:
    exits = replace(CLUSTER, hang_share=0.0)
    grown = replace(COSTS, stall_per_group_s=0.01, rejoin_stall_s=2.0)
    assert gm.stalls(exits, grown) == pytest.approx(COSTS.stall_s + 0.01 * 512 + 2.0)
    assert gm.lamplighter(exits, WORK, grown).goodput < gm.lamplighter(exits, WORK, COSTS).goodput


def test_the_published_figures_are_listed_with_their_scale() -> None:
    sources = " ".join(p.source for p in rg.PUBLISHED)
    for name in ("Llama 3", "ByteRobust", "HyperPod", "FT-HSDP"):
        assert name in sources
    assert all(p.figure and p.scale for p in rg.PUBLISHED)


def test_every_measured_input_is_read_by_some_input_of_the_model() -> None:
    """No measurement is parsed that nothing reads (poll_back_s and node_crash_s were, once)."""
    assert set(ms.snapshot()) == {k for a in rg.ASSUMPTIONS for k in a.measured}
