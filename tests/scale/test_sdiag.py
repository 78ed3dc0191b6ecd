"""sdiag's RPC counts, parsed from output recorded on the lab's Slurm 22.05."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.lab.sdiag import parse_sdiag

RECORDED = Path(__file__).parent / "recorded"


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
