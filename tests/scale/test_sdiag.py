"""sdiag's RPC counts, parsed from output recorded on the lab's Slurm 22.05."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from lamplighter.lab.sdiag import parse_sdiag

RECORDED = Path(__file__).parent / "recorded"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def srs(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(REPO))  # the benchmark package sits at the top and is not installed
    return importlib.import_module("bench.slurm_rpc_scale")


def test_rpcs_by_type_and_user_and_the_window_they_were_counted_in() -> None:
    sd = parse_sdiag((RECORDED / "sdiag_after_reset.txt").read_text())
    assert (sd.since, sd.at, sd.seconds) == (1795749034, 1795749035, 1)
    assert sd.by_type["REQUEST_JOB_INFO"].count == 6
    assert sd.by_type["REQUEST_NODE_INFO"].id == 2007
    assert sd.by_type["REQUEST_NODE_INFO"].ave_us == 176
    assert sd.by_type["REQUEST_STATS_INFO"].count == 1  # the recording's own sdiag
    assert sd.by_user["root"].count == 16 == sd.total()  # from 3 squeue, 3 show job, 3 show node
    rates = sd.per_second()
    assert "REQUEST_STATS_INFO" not in rates and rates["REQUEST_PARTITION_INFO"] == 6


def test_what_is_not_sdiag_output_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse_sdiag("slurm_load_ctl_conf error: Unable to contact slurm controller\n")


def test_slurms_own_rpcs_are_not_lamplighters_and_the_growth_is_a_line(srs: ModuleType) -> None:
    rates = {"REQUEST_JOB_INFO_SINGLE": 0.8, "MESSAGE_NODE_REGISTRATION_STATUS": 0.3, "REQUEST_JOB_INFO": 2.0}
    assert srs.lamplighter_rate(rates) == pytest.approx(2.8)
    a, b = srs.fit_line([4.0, 16.0], [7.6, 12.4])
    assert (a, b) == (pytest.approx(6.0), pytest.approx(0.4))
    with pytest.raises(ValueError):
        srs.fit_line([4.0, 4.0], [1.0, 2.0])


def test_a_size_whose_daemons_could_not_keep_their_cycle_is_left_out_of_the_line(srs: ModuleType) -> None:
    def row(nodes: int, fencing_per_node: float, total: float) -> dict[str, object]:
        return {
            "nodes": nodes,
            "by_type_per_s": {srs.FENCING: fencing_per_node * nodes},
            "lamplighter_rpc_per_s": total,
        }

    line = srs.fit([row(4, 0.2, 7.6), row(16, 0.2, 12.4), row(64, 0.09, 17.0)])
    assert line["over_nodes"] == [4, 16] and list(line["left_out_cpu_starved"]) == ["64"]
    assert line["per_node"] == pytest.approx(0.4) and line["projected"]["1000"] == pytest.approx(406.0)
    assert srs.fit([row(4, 0.2, 7.6), row(64, 0.09, 17.0)]) is None
