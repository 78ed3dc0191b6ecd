"""sdiag's RPC counts, parsed from output recorded on the lab's Slurm 22.05."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from lamplighter.lab.sdiag import RpcStat, Sdiag, parse_sdiag

RECORDED = Path(__file__).parent / "recorded"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def srs(bench: ModuleType) -> ModuleType:
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


def test_rpcs_are_told_apart_by_sender_with_the_jobs_owner_apart_from_root(srs: ModuleType) -> None:
    # Recorded on the lab's Slurm 22.05: a throwaway user ran squeue three times (6 RPCs), root ran
    # `scontrol show nodes` (2) and sdiag (1).
    sd = parse_sdiag((RECORDED / "sdiag_two_users.txt").read_text())
    assert sd.by_user["llrecf577411c"].id == 1003 and sd.by_user["llrecf577411c"].count == 6
    senders = srs.by_sender(sd, "llrecf577411c")
    assert senders == {"lamplighter": 2.0, "slurm_daemons": 0.0, "jobs_user": 6.0, "others": 0.0}
    # The user's calls are not root's, whoever else is counted: an unknown owner is counted as others.
    assert srs.by_sender(sd, "nobody")["others"] == 6.0


def test_slurms_own_daemons_send_as_root_and_are_not_counted_as_lamplighter(srs: ModuleType) -> None:
    def sdiag(root: int, registrations: int) -> Sdiag:
        by_type = {
            "MESSAGE_NODE_REGISTRATION_STATUS": RpcStat("MESSAGE_NODE_REGISTRATION_STATUS", 1002, registrations, 1, 1)
        }
        return Sdiag(at=110, since=100, by_type=by_type, by_user={"root": RpcStat("root", 0, root, 1, 1)})

    assert srs.by_sender(sdiag(12, 4), "alice")["lamplighter"] == pytest.approx(0.8)
    with pytest.raises(ValueError, match="fewer than Slurm's own"):
        srs.by_sender(sdiag(3, 4), "alice")  # not sdiag's arithmetic: say so rather than report a negative rate


def test_every_size_counted_by_sender_is_in_the_line_and_a_starved_one_from_before_is_not(srs: ModuleType) -> None:
    def row(nodes: int, rate: float, running: int, by_user: bool = True) -> dict[str, object]:
        r: dict[str, object] = {"nodes": nodes, "lamplighter_rpc_per_s": rate, "jobs_running_at_end": running}
        return {**r, "rpc_from": "sdiag by user"} if by_user else r

    line = srs.fit([row(4, 0.8, 4), row(16, 0.8, 16), row(64, 0.8, 63)])
    assert line["over_nodes"] == [4, 16, 64] and line["per_unit"] == pytest.approx(0.0)
    assert line["projected"]["10000"] == pytest.approx(0.8)
    # Counted in a 30-s window, 0.77 at 4 nodes and 0.80 at 64 is one RPC's rounding: flat, not 0.0005 a node.
    timed = [{**row(n, v, n), "window_s": 30} for n, v in ((4, 0.774), (16, 0.8), (64, 0.8))]
    assert srs.fit(timed)["flat_within"] == pytest.approx(1 / 30)
    assert srs.fit(timed)["projected"]["10000"] == pytest.approx(0.791, abs=1e-3)
    old = srs.fit([row(4, 7.6, 4, False), row(16, 12.4, 16, False), row(64, 17.0, 60, False)])
    assert old["over_nodes"] == [4, 16] and old["projected"]["1000"] == pytest.approx(406.0)
    assert srs.fit([row(4, 7.6, 4, False), row(64, 17.0, 60, False)]) is None


def test_a_faults_rpcs_are_what_its_window_counted_over_the_steady_state(srs: ModuleType) -> None:
    steady = {
        "rpc_per_s_by_sender": {"lamplighter": 0.8, "jobs_user": 0.0},
        "by_type_per_s": {"REQUEST_JOB_INFO": 0.4, "REQUEST_NODE_INFO": 0.2, "MESSAGE_NODE_REGISTRATION_STATUS": 0.1},
    }
    by_type = {
        k: RpcStat(k, 0, n, 1, 1)
        for k, n in (
            ("REQUEST_JOB_INFO", 14),  # 4 in 10 s at steady state: 10 over
            ("REQUEST_NODE_INFO", 2),  # as steady
            ("REQUEST_UPDATE_NODE", 1),  # the drain
            ("MESSAGE_NODE_REGISTRATION_STATUS", 1),  # Slurm's own, as steady
            ("REQUEST_STATS_INFO", 2),  # sdiag's
        )
    }
    users = {"root": RpcStat("root", 0, 20, 1, 1), "alice": RpcStat("alice", 1001, 3, 1, 1)}
    cost = srs.fault_rpcs(Sdiag(at=110, since=100, by_type=by_type, by_user=users), "alice", steady)
    # root's 20, less Slurm's 1 and sdiag's 2: 17 in 10 s, against 8 at steady state.
    assert cost == {
        "span_s": 10,
        "lamplighter": 9.0,
        "jobs_user": 3.0,
        "by_type_over_steady": {"REQUEST_JOB_INFO": 10.0, "REQUEST_UPDATE_NODE": 1.0},
    }
