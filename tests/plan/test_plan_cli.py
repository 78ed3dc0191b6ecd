"""`lamplighter plan`, run in-process: the table, JSON, the sweep, the plot and exit 2 on bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from lamplighter.commands.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(["plan", *args])
    except SystemExit as e:  # argparse rejects a value before the command runs
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_table_gives_each_strategy_a_range_names_the_assumptions_and_the_published_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--gpus", "16384", "--model", "70b")
    assert code == 0
    assert "16384 GPUs in 512 groups of 32" in out and "job MTBF 3.09 h" in out
    rows = {
        line.split()[0]: line.split()[1:4]
        for line in out.splitlines()
        if line.split()[:1] in (["lamplighter"], ["ckpt-restart"], ["poll-10s"])
    }
    assert set(rows) == {"lamplighter", "ckpt-restart", "poll-10s"}
    for low, central, high in rows.values():
        assert float(low) <= float(central) <= float(high)
    for needle in (
        "survivors' stall when a group fails",
        "FT-HSDP",
        "faults a group restart cannot absorb",
        "Llama 3",
        "ByteRobust",
        "HyperPod",
    ):
        assert needle in out


def test_json_has_goodput_per_strategy_in_each_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--gpus", "1024", "--model", "8b", "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc["scenarios"]) == {"low", "central", "high"}
    for scenario in doc["scenarios"].values():
        assert scenario["inputs"]["cluster"]["gpus"] == 1024 and scenario["inputs"]["cluster"]["group_gpus"] == 8
        assert set(scenario["strategies"]) == {"lamplighter", "ckpt-restart", "poll-10s", "in-job-restart"}
        assert all(0 < s["goodput"] <= 1 for s in scenario["strategies"].values())
        assert scenario["inputs"]["costs"]["ckpt_interval_s"] is None
    assert doc["published"][0]["source"].startswith("Llama 3")


def test_a_given_input_holds_in_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "--gpus", "1024", "--json", "--stall-s", "7", "--hang-share", "0.2")
    doc = json.loads(out)
    for scenario in doc["scenarios"].values():
        assert scenario["inputs"]["costs"]["stall_s"] == 7.0 and scenario["inputs"]["cluster"]["hang_share"] == 0.2
    assert doc["pinned"] == {"stall_s": 7.0, "hang_share": 0.2}


def test_options_reach_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(
        capsys, "--gpus", "1024", "--model", "8b", "--json", "--failures-per-node-day", "0", "--step-overhead", "0"
    )
    for scenario in json.loads(out)["scenarios"].values():
        assert all(s["goodput"] == 1.0 for s in scenario["strategies"].values())
    _, out, _ = run(capsys, "--gpus", "1024", "--json", "--params-b", "1", "--bytes-per-param", "10")
    assert json.loads(out)["scenarios"]["central"]["inputs"]["workload"]["state_bytes"] == pytest.approx(1e10)


def test_sweep_covers_64_to_16k_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--model", "8b", "--sweep")
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.split() and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == [64 * 2**k for k in range(9)]
    code, out, _ = run(capsys, "--model", "70b", "--sweep", "--json")
    doc = json.loads(out)
    assert code == 0 and set(doc) >= {"64", "1024", "16384"} and set(doc["1024"]) == {"low", "central", "high"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpus", "0"], "must be positive"),
        (["--gpus", "-8"], "must be positive"),
        (["--gpus", "many"], "not a number"),
        (["--gpus", "100", "--model", "70b"], "multiple of group_gpus"),
        (["--gpus", "32", "--model", "70b"], "no live replica group"),
        (["--hang-share", "1.5"], "within 0..1"),
        (["--nonlocal-share", "2"], "within 0..1"),
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


def test_the_plot_shows_lost_gpu_hours_a_day_on_a_log_axis(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    drawn: list[Figure] = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (drawn.append(self), save(self, *a, **k))[1])
    assert run(capsys, "--plot", str(tmp_path / "g.png"))[0] == 0
    [fig] = drawn
    lost = [ax for ax in fig.axes if ax.get_yscale() == "log"]
    assert len(lost) == 2 and lost[0].get_ylabel() == "GPU-hours lost per day (log)"
    # Every strategy drawn on both: goodput above, its lost hours below.
    goodput = [ax for ax in fig.axes if ax.get_yscale() == "linear"]
    assert all(len(a.lines) == len(b.lines) >= 3 for a, b in zip(goodput, lost, strict=True))


def test_the_table_says_which_strategies_do_not_differ_and_how_the_time_limit_moves_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--gpus", "1024", "--model", "8b")
    assert code == 0
    assert "poll-10s and in-job-restart do not differ under the central inputs" in out
    limits = out.split("central goodput against the job's time limit", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    rows = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in limits}
    assert list(rows) == ["4h", "24h", "72h"]
    # lamplighter repairs what the others leave to the time limit: only theirs falls as it grows.
    assert rows["4h"][0] == rows["72h"][0] and rows["4h"][3] > rows["72h"][3]
    assert "measured inputs, where each came from" in out and "fault_cost.json@" in out


def test_results_read_from_a_directory_override_the_snapshot_and_a_bad_one_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    results = Path(__file__).resolve().parents[2] / "bench" / "results"
    doc = json.loads((results / "busy_queue.json").read_text())
    for a in doc["absences"]:
        a["queue_wait_s"] = 600.0
    (tmp_path / "busy_queue.json").write_text(json.dumps(doc))
    _, out, _ = run(capsys, "--gpus", "1024", "--json", "--results", str(tmp_path))
    central = json.loads(out)["scenarios"]["central"]["inputs"]["costs"]
    assert central["queue_wait_s"] == 600.0
    assert (
        central["detect_s"]
        == json.loads((results / "fault_cost.json").read_text())["table"]["kill"]["lamplighter"]["detect_s"]["median"]
    )  # a file the directory lacks keeps the snapshot's
    (tmp_path / "busy_queue.json").write_text('{"absences": []}')
    code, _, err = run(capsys, "--results", str(tmp_path))
    assert code == 2 and "busy_queue.json has no absences[].queue_wait_s" in err
    code, _, err = run(capsys, "--results", str(tmp_path / "nowhere"))
    assert code == 2 and "not a directory" in err
