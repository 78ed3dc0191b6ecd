"""The scale lab's pure parts: the replica's group list, and how the Lighthouse benchmark reads its events."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

from lamplighter.lab.scale_replica import parse_groups

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def ls(bench: ModuleType) -> ModuleType:
    return importlib.import_module("bench.lighthouse_scale")


def test_groups_are_listed_or_ranged_once_each() -> None:
    assert parse_groups("3") == [3]
    assert parse_groups("0-3,8") == [0, 1, 2, 3, 8]
    assert parse_groups("2,0-2") == [2, 0, 1]
    for bad in ("", "a", "3-", "-3", "5-2", "1,,2"):
        with pytest.raises(ValueError):
            parse_groups(bad)


def step_line(g: int, t0: float, n: int, committed: bool = True, qid: int = 1, heal: bool = False) -> str:
    rec = {"g": g, "t0": t0, "t1": t0 + 0.01, "t2": t0 + 1.01, "c": committed, "s": 1, "qid": qid, "n": n}
    return json.dumps({**rec, "heal": heal})


def test_events_are_read_as_the_files_grow_and_a_partial_line_waits(ls: ModuleType, tmp_path: Path) -> None:
    f = tmp_path / "replica-0-1.jsonl"
    f.write_text(json.dumps({"ev": "ready", "t": 1.0, "pid": 5}) + "\n" + step_line(0, 10.0, 4) + "\n" + '{"g": 0, "t')
    ev = ls.Events(tmp_path)
    ev.poll()
    assert [s.t0 for s in ev.steps[0]] == [10.0] and ev.others[0]["ev"] == "ready"
    with open(f, "a") as out:
        out.write('0": 11.0, "err": "timeout"}\n' + step_line(0, 12.0, 3) + "\n")
    ev.poll()
    assert [s.size for s in ev.steps[0]] == [4, 3]
    assert ev.others[1]["err"] == "timeout"
    assert ls.parse_event("not json") is None and ls.parse_event("[1]") is None


def test_a_change_is_measured_from_each_survivors_own_steps(ls: ModuleType) -> None:
    Step = ls.Step

    def steps(g: int, t0s: list[float], sizes: list[int]) -> list[object]:
        return [
            Step(g, t, t + 0.01, t + 1.01, True, 1 if n == 4 else 2, n, False) for t, n in zip(t0s, sizes, strict=True)
        ]

    # Steady steps every ~1.02 s; the kill at 13.5; group 1 waits 0.5 s for the quorum of 3, group 2 1.0 s.
    by_group = {
        1: steps(1, [10.0, 11.02, 12.04, 13.06, 14.6, 15.62], [4, 4, 4, 4, 3, 3]),
        2: steps(2, [10.0, 11.02, 12.04, 13.06, 15.1, 16.12], [4, 4, 4, 4, 3, 3]),
    }
    by_group[1][4] = Step(1, 14.08, 14.6, 15.6, True, 2, 3, False)  # asked at 14.08, held at 14.6
    by_group[2][4] = Step(2, 14.08, 15.1, 16.1, True, 2, 3, False)
    period = {g: ls.step_period(s, 10.0, 13.5) for g, s in by_group.items()}
    assert period[1] == pytest.approx(1.02)
    assert ls.quorum_reached(by_group[1], 13.5, 3) == pytest.approx(14.6)
    assert ls.quorum_reached(by_group[1], 13.5, 4) is None
    assert ls.commit_gap(by_group[2], 13.5, 15.1) == pytest.approx(16.1 - 14.07)
    assert ls.commit_gap(by_group[2], 13.5, 17.5) is None  # no commit after it yet
    m = ls.change_measures(by_group, [1, 2, 7], 13.5, 3, period)
    assert m["quorum_after_s"]["max"] == pytest.approx(1.6) and m["quorum_after_s"]["n"] == 2
    assert m["survivor_stall_s"]["max"] == pytest.approx(16.1 - 14.07 - 1.02)
    assert m["groups_without_that_quorum"] == [7]


def test_killed_groups_run_alone_and_the_rest_share_processes(ls: ModuleType) -> None:
    assert ls.packs(10, 2, 4) == [[0], [1], [2, 3, 4, 5], [6, 7, 8, 9]]
    assert ls.packs(3, 0, 8) == [[0, 1, 2]]
    assert ls.percentile([3.0, 1.0, 2.0, 4.0], 0.0) == 1.0
    assert ls.percentile([3.0, 1.0, 2.0, 4.0], 1.0) == 4.0
    assert ls.summary([]) is None


def test_churn_counts_changes_sizes_commits_and_heals(ls: ModuleType) -> None:
    Step = ls.Step
    steps = {
        0: [Step(0, 0.0, 1.0, 2.0, True, 5, 2, False), Step(0, 3.0, 4.0, 5.0, True, 6, 2, True)],
        1: [Step(1, 0.0, 1.0, 2.0, True, 5, 2, False)],
        2: [Step(2, 3.0, 4.0, 5.0, True, 6, 2, True)],
    }
    c = ls.churn(steps, 0.0, 10.0)
    assert c["quorum_changes_per_s"] == pytest.approx(0.1)  # 5 -> 6
    assert c["quorum_sizes"]["max"] == 2 and c["groups_holding_a_quorum"] == 3
    assert c["commits_per_group_s"] == pytest.approx(4 / 3 / 10)
    assert c["heals_per_s"] == pytest.approx(0.2)


@pytest.mark.integration
def test_a_hung_group_is_left_out_by_the_survivors_then_ended_and_taken_back(ls: ModuleType, tmp_path: Path) -> None:
    """A real Lighthouse and 4 torch-free groups: one killed, then one stopped (SIGSTOP), each left out of the
    survivors' next quorum and back in a quorum of all 4 once started again."""
    row = ls.measure_size(tmp_path / "run", 4, kills=1, per_process=2, step_s=0.5, window_s=2.0, hangs=1)
    assert row["formed"] and [r["fault"] for r in row["rounds"]] == ["kill", "hang"]
    assert all(r["rejoined"] and r["rejoin_healed"] for r in row["rounds"])
    hang = row["rounds"][1]["hang"]
    assert hang["groups_without_that_quorum"] == [] and hang["survivor_stall_s"]["n"] == 3
    assert row["quorum_changes"] == row["quorum_changes_expected"] == 4 and row["errors"] == 0
    head = ls.headline(row)
    assert head["survivor_stall_hang_s"] is not None and head["quorum_after_hang_s"] is not None
