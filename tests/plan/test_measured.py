"""plan's measured inputs, parsed from the benchmark's recorded result files: what each reads, and bad files named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lamplighter.plan import measured as ms

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def doc(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def test_the_shipped_snapshot_is_what_bench_results_give() -> None:
    """`make plan-inputs` after a bench run: a result file changed without it shows here."""
    assert ms.load(RESULTS) == ms.snapshot()
    assert set(ms.snapshot()) >= {"detect_s", "restart_cold_s", "stall_s", "queue_wait_s", "gpu_fault_s"}


def test_fault_costs_give_detection_the_hang_lag_and_the_restarts_less_detection() -> None:
    fc = doc("fault_cost")
    got = ms.from_results({"fault_cost": fc})
    kill = fc["table"]["kill"]
    detect = kill["lamplighter"]["detect_s"]
    assert got["detect_s"].values() == (detect["max"], detect["median"], detect["min"])
    assert got["hang_detect_lag_s"].central == pytest.approx(
        fc["table"]["hang"]["lamplighter"]["detect_s"]["median"] - ms.BENCH_HANG_TIMEOUT_S
    )
    assert got["restart_cold_s"].central == pytest.approx(kill["lamplighter"]["back_s"]["median"] - detect["median"])
    assert got["restart_warm_s"].central == pytest.approx(
        kill["lamplighter-spare"]["back_s"]["median"] - detect["median"]
    )
    assert got["detect_s"].source.startswith(f"fault_cost.json@{fc['environment']['commit']} ")
    # A recorded hang timeout is used over the harness's default.
    fc["config"]["hang_timeout_s"] = 8
    assert ms.from_results({"fault_cost": fc})["hang_detect_lag_s"].central == pytest.approx(
        fc["table"]["hang"]["lamplighter"]["detect_s"]["median"] - 8
    )


def test_every_input_runs_pessimistic_to_optimistic() -> None:
    for m in ms.snapshot().values():
        assert m.low >= m.central >= m.high, m


def test_a_queue_wait_cut_short_by_the_runs_end_is_not_a_wait() -> None:
    bq = doc("busy_queue")
    waits = [a["queue_wait_s"] for a in bq["absences"] if not a["run_ended_first"]]
    assert len(waits) < len(bq["absences"])  # the recorded run has one
    got = ms.from_results({"busy_queue": bq})["queue_wait_s"]
    assert (got.low, got.high) == (max(waits), min(waits))


def test_the_quorums_growth_is_a_least_squares_slope() -> None:
    assert ms.slope([(1, 1.0), (2, 3.0), (3, 5.0)]) == pytest.approx(2.0)
    assert ms.slope([(4, 1.0), (4, 2.0)]) == 0.0
    q = ms.from_results({"lighthouse_quorum": doc("lighthouse_quorum")})["quorum_per_group_s"]
    assert 0 < q.central < 0.01


@pytest.mark.parametrize(
    ("name", "broken", "says"),
    [
        ("fault_cost", {"table": {}}, "fault_cost.json has no table.kill.lamplighter.detect_s"),
        ("stall_groups", {"table": {"kill": {}}, "fit": {}}, "stall_groups.json has no kill table or fit"),
        ("busy_queue", {"absences": [{"queue_wait_s": "soon"}]}, "busy_queue.json has no absences[].queue_wait_s"),
        ("hw_fault_path", {"summary": {"gpu_fault": {"running_elsewhere_s": {"median": 1}}}}, "not a median/min/max"),
        ("overhead", {"rows": "none"}, "overhead.json has no rows"),
        ("demo-slurm", {"report": {"faults": [{"kind": "kill"}]}}, "no lighthouse-kill fault"),
    ],
)
def test_a_malformed_result_is_named_with_its_file_and_field(name: str, broken: dict, says: str) -> None:
    with pytest.raises(ms.MalformedResult, match=says.replace("[", r"\[").replace("]", r"\]")):
        ms.from_results({name: broken})


def test_load_reads_only_its_files_and_refuses_one_too_big_or_not_json(tmp_path: Path) -> None:
    (tmp_path / "unrelated.json").write_text("{not json")
    assert ms.load(tmp_path) == {}
    (tmp_path / "overhead.json").write_text("[1, 2]")
    with pytest.raises(ms.MalformedResult, match="not a JSON object"):
        ms.load(tmp_path)
    (tmp_path / "overhead.json").write_text("{")
    with pytest.raises(ms.MalformedResult, match="not JSON"):
        ms.load(tmp_path)
    with (tmp_path / "overhead.json").open("wb") as f:
        f.truncate(ms.MAX_FILE_BYTES + 1)
    with pytest.raises(ms.MalformedResult, match="larger than"):
        ms.load(tmp_path)
