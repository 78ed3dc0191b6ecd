"""Parsing --chaos and planning faults: pure, seeded."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from lamplighter.chaos.plan import ChaosSpecError, parse_chaos, parse_duration, pick_group, plan
from lamplighter.configs.schema import ChaosConfig, ChaosEvent


@pytest.mark.parametrize("text,seconds", [("20s", 20.0), ("500ms", 0.5), ("1.5m", 90.0), ("2h", 7200.0), ("3", 3.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_mtbf_spec_with_kinds_list() -> None:
    cfg = parse_chaos("mtbf=20s,seed=7,kinds=kill,hang,lighthouse-kill,max=4")
    assert cfg.enabled and cfg.mtbf_s == 20.0 and cfg.seed == 7 and cfg.max_faults == 4
    assert cfg.kinds == ["kill", "hang", "lighthouse-kill"]


@pytest.mark.parametrize(
    "spec,msg",
    [
        ("seed=1", "mtbf"),
        ("mtbf=fast", "not a duration"),
        ("mtbf=2s,kinds=kill,melt", "unknown fault kind 'melt'"),
        ("mtbf=2s,colour=red", "unknown key"),
        ("mtbf=2s,seed=x", "not an integer"),
        ("mtbf=2s,oops", "not key=value"),
    ],
)
def test_bad_specs(spec: str, msg: str) -> None:
    with pytest.raises(ChaosSpecError, match=msg):
        parse_chaos(spec)


def test_schedule_file_list_and_mapping(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("- {at_s: 5, kind: kill, group: 1}\n- {at_s: 2, kind: lighthouse-kill}\n")
    cfg = parse_chaos("@a.yaml", base_dir=tmp_path)
    assert [(f.at_s, f.kind, f.group) for f in plan(cfg, 3)] == [(2.0, "lighthouse-kill", None), (5.0, "kill", 1)]
    (tmp_path / "b.yaml").write_text("mtbf_s: 3\nseed: 2\nkinds: [hang]\nmax_faults: 2\n")
    assert [f.kind for f in plan(parse_chaos("@b.yaml", base_dir=tmp_path), 3)] == ["hang", "hang"]
    (tmp_path / "c.yaml").write_text("- {at_s: 5, kind: boom}\n")
    with pytest.raises(ChaosSpecError, match=r"c\.yaml"):
        parse_chaos("@c.yaml", base_dir=tmp_path)
    with pytest.raises(ChaosSpecError, match=r"missing\.yaml"):
        parse_chaos("@missing.yaml", base_dir=tmp_path)


def test_random_plan_is_seeded_and_spaced_from_start() -> None:
    cfg = ChaosConfig(enabled=True, mtbf_s=10.0, seed=3, start_after_s=5.0, max_faults=50, kinds=["kill", "hang"])
    a, b = list(plan(cfg, 3)), list(plan(cfg, 3))
    assert a == b and len(a) == 50
    assert all(f.at_s > 5.0 for f in a) and [f.at_s for f in a] == sorted(f.at_s for f in a)
    mean_gap = (a[-1].at_s - 5.0) / 50
    assert 5.0 < mean_gap < 20.0
    assert {f.kind for f in a} == {"kill", "hang"}
    assert list(plan(cfg.model_copy(update={"seed": 4}), 3)) != a
    assert list(plan(cfg.model_copy(update={"enabled": False}), 3)) == []
    # Without max_faults the draws go on as long as they are taken, the same ones: max only cuts them off.
    endless = plan(cfg.model_copy(update={"max_faults": None}), 3)
    assert list(itertools.islice(endless, 60))[:50] == a


def test_event_for_missing_group_is_refused() -> None:
    cfg = ChaosConfig(enabled=True, schedule=[ChaosEvent(at_s=1, kind="kill", group=5)])
    with pytest.raises(ChaosSpecError, match="group 5"):
        plan(cfg, 3)


def test_pick_group_is_reproducible_and_healthy() -> None:
    picks = [pick_group([0, 2], i, seed=1) for i in range(20)]
    assert picks == [pick_group([2, 0], i, seed=1) for i in range(20)]
    assert set(picks) == {0, 2}
