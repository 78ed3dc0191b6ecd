"""The README's benchmark tables are what bench/results holds, and they say which files came from another run."""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def report(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(REPO))  # the benchmark package sits at the top and is not installed
    return importlib.import_module("bench.report")


@pytest.mark.parametrize("doc", ["README.md", "bench/README.md"])
def test_the_readmes_hold_the_tables_of_the_committed_results(report: ModuleType, doc: str) -> None:
    block = report.embedded((REPO / doc).read_text())
    assert block is not None, f"{doc} has no {report.BEGIN} block"
    assert block == report.render(), f"{doc}'s benchmark tables are stale: run `python -m bench.report --write {doc}`"


def test_a_file_from_another_run_is_named_as_such(report: ModuleType, tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(REPO / "bench" / "results", results)
    run = json.loads((results / "bench_run.json").read_text())
    stamp = run["environment"]["bench_run"]
    assert stamp, "the committed bench_run.json carries no stamp"
    text = report.render(results)
    assert "Every file below comes from that run" in text, text.split("\n")[2:5]
    # An older heal result copied over this run's: the tables must not pass it off as the run's.
    heal = json.loads((results / "heal_bandwidth.json").read_text())
    heal["environment"] = {**heal["environment"], "bench_run": "0000000 2026-01-01T00:00:00Z", "commit": "0000000"}
    (results / "heal_bandwidth.json").write_text(json.dumps(heal))
    (results / "overhead.json").unlink()
    text = report.render(results)
    assert "heal_bandwidth.json (commit 0000000, another run)" in text
    assert "overhead.json (missing)" in text
    assert "Every file below comes from that run" not in text


def test_a_model_check_recomputed_from_the_runs_files_belongs_to_it_and_one_from_others_does_not(
    report: ModuleType, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    shutil.copytree(REPO / "bench" / "results", results)
    check = json.loads((results / "model_check.json").read_text())
    stamp = json.loads((results / "bench_run.json").read_text())["environment"]["bench_run"]
    check["environment"] = {**check["environment"], "bench_run": None, "commit": "1234567"}
    for source in ("goodput", "recovery"):
        check["source"][source] = {**check["source"][source], "bench_run": stamp}
    (results / "model_check.json").write_text(json.dumps(check))
    assert "model_check.json was recomputed from its goodput.json and recovery.json at commit 1234567" in (
        report.render(results)
    )
    check["source"]["recovery"]["bench_run"] = "0000000 2026-01-01T00:00:00Z"  # fed another run's recoveries
    (results / "model_check.json").write_text(json.dumps(check))
    assert "model_check.json (commit 1234567, another run)" in report.render(results)
