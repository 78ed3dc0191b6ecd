"""Loss per fault: the comparison that does not depend on how many faults a strategy could be dealt."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(strategy: str, mtbf: float | None, rate: float, train_s: float, faults: int) -> dict[str, Any]:
    return {
        "run": {"strategy": strategy, "mtbf_s": mtbf, "rep": 0, "extra": {}},
        "metrics": {
            "goodput_samples_per_s": rate,
            "train_s": train_s,
            "faults": faults,
            "reached": True,
            "wall_to_target_s": train_s,
            "steps_lost_per_fault": 0.0 if faults else None,
        },
    }


def test_a_strategy_dealt_fewer_faults_wins_on_goodput_and_loses_per_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    summarize = importlib.import_module("bench.summarize")
    rows = [
        run("lamplighter", None, 100.0, 15.0, 0),
        run("lamplighter", 4.0, 50.0, 60.0, 12),  # half the rate over 60 s: 30 s lost, 2.5 s per fault
        run("poll-10s", None, 100.0, 15.0, 0),
        run("poll-10s", 4.0, 60.0, 60.0, 2),  # one hang ends its exposure: 24 s lost in 2 faults
    ]
    good = summarize.goodput_table(rows)
    m = good["table"]
    assert m["lamplighter"]["4"]["lost_s_per_fault"]["median"] == pytest.approx(2.5)
    assert m["poll-10s"]["4"]["lost_s_per_fault"]["median"] == pytest.approx(12.0)
    ratio = good["ratios"]["lamplighter/poll-10s"]["4"]
    assert ratio["goodput_rel"]["median"] == pytest.approx(0.5 / 0.6)
    assert ratio["lost_s_per_fault"]["median"] == pytest.approx(2.5 / 12.0)
    # A fault-free run has no loss per fault.
    assert m["lamplighter"]["fault-free"]["lost_s_per_fault"] == {"never": 1, "n": 0}
