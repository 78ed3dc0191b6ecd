"""The README's benchmark tables are what bench/results holds, and they say which files came from another run."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def report(bench: ModuleType) -> ModuleType:
    return importlib.import_module("bench.report")


@pytest.mark.parametrize("doc", ["docs/results.md", "bench/README.md"])
def test_the_readmes_hold_the_tables_of_the_committed_results(report: ModuleType, doc: str) -> None:
    block = report.embedded((REPO / doc).read_text())
    assert block is not None, f"{doc} has no {report.BEGIN} block"
    assert block == report.render(), f"{doc}'s benchmark tables are stale: run `python -m bench.report --write {doc}`"


STAMP = "abc1234 2026-11-27T00:00:00Z"


def one_run(report: ModuleType, root: Path) -> Path:
    """A results dir whose every file carries one `make bench` stamp, and whose separately made parts carry
    their own target's (only what the stamp lines read)."""
    results = root / "results"
    results.mkdir()
    env = {"commit": "abc1234", "bench_run": STAMP}
    source = {"commit": "abc1234", "when": "2026-11-27T00:00:00Z", "host_cpus": 2, "torch": "t", "torchft": "f"}
    run = {"source": source, "environment": env, "parts_s": {"goodput": 60.0}, "total_s": 60.0}
    (results / "bench_run.json").write_text(json.dumps(run))
    for names in report.FILES.values():
        for name in names:
            (results / f"{name}.json").write_text(json.dumps({"environment": env}))
    for part, (name, _target) in report.SEPARATE.items():
        own = {**run, "environment": {**env, "bench_run": f"abc1234 {part}"}}
        (results / f"bench_run_{part}.json").write_text(json.dumps(own))
        (results / f"{name}.json").write_text(json.dumps({"environment": own["environment"]}))
    return results


def stamps(report: ModuleType, results: Path) -> str:
    return "\n".join(report.stamp_lines(results))


def test_a_file_from_another_run_is_named_as_such(report: ModuleType, tmp_path: Path) -> None:
    results = one_run(report, tmp_path)
    assert "Every file below comes from these runs" in stamps(report, results)
    # An older heal result copied over the one make bench-heal recorded, and a part's file gone: the tables must
    # not pass them off as the run's.
    heal = {"environment": {"bench_run": "0000000 2026-01-01T00:00:00Z", "commit": "0000000"}}
    (results / "heal_bandwidth.json").write_text(json.dumps(heal))
    (results / "overhead.json").unlink()
    (results / "goodput_big.json").write_text(json.dumps({"environment": heal["environment"]}))
    text = stamps(report, results)
    assert "heal_bandwidth.json (not the one make bench-heal recorded)" in text
    assert "goodput_big.json (commit 0000000, another run)" in text
    assert "overhead.json (missing)" in text
    assert "Every file below comes from these runs" not in text


def test_a_model_check_recomputed_from_the_runs_files_belongs_to_it_and_one_from_others_does_not(
    report: ModuleType, tmp_path: Path
) -> None:
    results = one_run(report, tmp_path)
    check = {
        "environment": {"bench_run": None, "commit": "1234567"},
        "source": {s: {"bench_run": STAMP} for s in report.DERIVED["model_check"]},
    }
    (results / "model_check.json").write_text(json.dumps(check))
    assert "model_check.json was recomputed from its goodput.json and fault_cost.json at commit 1234567" in (
        stamps(report, results)
    )
    check["source"]["fault_cost"]["bench_run"] = "0000000 2026-01-01T00:00:00Z"  # fed another run's costs
    (results / "model_check.json").write_text(json.dumps(check))
    assert "model_check.json (commit 1234567, another run)" in stamps(report, results)


def test_results_from_the_harness_before_identical_faults_are_named_and_not_shown(
    report: ModuleType, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    env = {"commit": "88d4ded", "bench_run": STAMP}
    old = {"environment": env, "config": {"mtbf_s": 2.0}, "table": {"lamplighter": {"goodput": 0.35}}}
    (results / "goodput.json").write_text(json.dumps(old))
    (results / "model_check.json").write_text(json.dumps({"environment": env, "source": {"recovery": {}}}))
    text = "\n".join(report.goodput_lines(results) + report.model_lines(results))
    assert "goodput.json is from the harness before identical delivered faults (commit 88d4ded)" in text
    assert "model_check.json is from the harness before identical delivered faults" in text
    assert "0.35" not in text


def test_the_readme_holds_each_demos_table_and_slurms_timings_from_their_result_files(report: ModuleType) -> None:
    text = (REPO / "docs" / "results.md").read_text()
    for mode in report.demo_tables.MODES:
        begin, end = report.demo_tables.markers(mode)
        block = report.embedded(text, begin, end)
        assert block is not None, f"docs/results.md has no {begin} block"
        assert (REPO / "bench" / "results" / f"demo-{mode}.json").exists(), f"no kept result of {mode}"
        assert block == report.demo_tables.render_mode(REPO / "bench" / "results", mode), (
            f"docs/results.md's {mode} demo table is stale: run `python -m bench.report --write docs/results.md`"
        )
    timings = importlib.import_module("bench.slurm_timings")
    assert (REPO / "bench" / "results" / "slurm_timings.json").exists(), "no kept result of make bench-slurm"
    assert report.embedded(text, timings.BEGIN, timings.END) == timings.render_block(), "stale: make bench-slurm"


def test_a_failed_demo_says_so_and_a_missing_one_is_named(report: ModuleType, tmp_path: Path) -> None:
    fault = {
        "kind": "kill",
        "group": 1,
        "detection_latency_s": 0.02,
        "restart_after_detection_s": 0.5,
        "first_commit_after_restart_s": 0.68,
        "survivor_stall_s": 0.64,
        "warm": True,
        "detected_as": "trainer exited -9 | by its supervisor",
    }
    rep = {
        "groups": {"0": {}, "1": {}},
        "faults": [fault],
        "steps_committed": 800,
        "target_steps": 900,
        "wall_s": 100.0,
        "steps_lost": 3,
        "weights_identical": False,
        "weights_check": "state hashes compared on 799 shared steps",
        "goodput": None,
    }
    doc = {"environment": {"commit": "abc1234", "when": "2026-11-26T00:00:00Z"}, "exit_code": 1, "report": rep}
    (tmp_path / "demo-local.json").write_text(json.dumps(doc))
    text = report.demo_tables.render_mode(tmp_path, "local")
    assert "**It FAILED (exit code 1).**" in text and "**3 steps lost**" in text and "at commit abc1234" in text
    assert "| kill (SIGKILL) | group 1 | 0.02 | +0.50 | +0.68 (warm standby) | 0.64 | trainer exited -9 / by" in text
    assert "`bench/results/demo-slurm.json` is missing" in report.demo_tables.render_mode(tmp_path, "slurm")
    # --write replaces each block the file holds and leaves the rest alone
    readme = tmp_path / "README.md"
    begin, end = report.demo_tables.markers("local")
    readme.write_text(f"intro\n{begin}\nold\n{end}\noutro\n")
    rewritten, found = report.rewrite(readme.read_text(), tmp_path)
    assert found == 1 and rewritten == f"intro\n{text}\noutro\n"


def test_make_demo_results_names_the_demos_it_knows(report: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    demos = importlib.import_module("bench.demos")
    with pytest.raises(SystemExit) as e:
        demos.main(["--only", "local,nope"])
    assert e.value.code == 2 and "unknown ['nope'] (known: local, slurm, bare)" in capsys.readouterr().err


def test_the_readmes_scale_tables_are_the_kept_scale_report(bench: ModuleType) -> None:
    scale_report = importlib.import_module("bench.scale_report")
    block = importlib.import_module("bench.report").embedded(
        (REPO / "README.md").read_text(), scale_report.BEGIN, scale_report.END
    )
    assert block is not None, f"README.md has no {scale_report.BEGIN} block"
    assert block == scale_report.render_block(), (
        "README's scale tables are stale: `python -m bench.report --write README.md`"
    )
