"""`lamplighter plan`, run in-process: the table, JSON, the sweep, the plot and exit 2 on bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from lamplighter.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(["plan", *args])
    except SystemExit as e:  # argparse rejects a value before the command runs
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_table_names_the_three_strategies(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--gpus", "16384", "--model", "70b")
    assert code == 0
    assert "16384 GPUs in 512 groups of 32" in out and "job MTBF 3.09 h" in out
    for name in ("lamplighter", "ckpt-restart", "poll-10s"):
        assert name in out


def test_json_has_goodput_per_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--gpus", "1024", "--model", "8b", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["inputs"]["cluster"]["gpus"] == 1024 and doc["inputs"]["cluster"]["group_gpus"] == 8
    strategies = doc["strategies"]
    assert set(strategies) == {"lamplighter", "ckpt-restart", "poll-10s"}
    assert all(0 < s["goodput"] <= 1 for s in strategies.values())
    assert strategies["lamplighter"]["goodput"] > strategies["ckpt-restart"]["goodput"]
    assert doc["inputs"]["costs"]["ckpt_interval_s"] is None


def test_options_reach_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "--gpus", "1024", "--model", "8b", "--json", "--failures-per-node-day", "0")
    assert all(s["goodput"] == 1.0 for s in json.loads(out)["strategies"].values())
    _, out, _ = run(capsys, "--gpus", "1024", "--json", "--params-b", "1", "--bytes-per-param", "10")
    assert json.loads(out)["inputs"]["workload"]["state_bytes"] == pytest.approx(1e10)


def test_sweep_covers_64_to_16k_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--model", "8b", "--sweep")
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.split() and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == [64 * 2**k for k in range(9)]
    code, out, _ = run(capsys, "--model", "70b", "--sweep", "--json")
    assert code == 0 and set(json.loads(out)) >= {"64", "1024", "16384"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpus", "0"], "must be positive"),
        (["--gpus", "-8"], "must be positive"),
        (["--gpus", "many"], "not a number"),
        (["--gpus", "100", "--model", "70b"], "multiple of group_gpus"),
        (["--gpus", "32", "--model", "70b"], "no live replica group"),
        (["--hang-share", "1.5"], "within 0..1"),
        (["--ckpt-write-gbs", "0"], "must be positive"),
        (["--job-restart-s", "-1"], "0 or more"),
        (["--failures-per-gpu-day", "1", "--failures-per-node-day", "1"], "not allowed with"),
        (["--model", "405b"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_a_message(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2 and needle in err and not out


def test_plot_without_matplotlib_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    code, _, err = run(capsys, "--plot", str(tmp_path / "g.png"))
    assert code == 1 and "needs matplotlib" in err and "lamplighter[plots]" in err
    assert not (tmp_path / "g.png").exists()


def test_plot_draws_a_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    code, out, _ = run(capsys, "--plot", str(tmp_path / "g.png"))
    assert code == 0 and "wrote" in out
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"
