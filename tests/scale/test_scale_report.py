"""make scale's report: the records #31 asks for, built from the benches' result files, nothing guessed."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture
def sr(bench: ModuleType) -> ModuleType:
    return importlib.import_module("bench.scale_report")


def write(folder: Path, name: str, doc: dict[str, object]) -> None:
    (folder / f"{name}.json").write_text(json.dumps({"environment": {"commit": "abc1234"}, **doc}))


def test_the_report_carries_every_size_and_leaves_what_was_not_measured_null(tmp_path: Path, sr: ModuleType) -> None:
    rpc = [
        {
            "nodes": n,
            "lamplighter_rpc_per_s": v,
            "slurmctld_rpc_per_s": v + 0.3,
            "head_cycle_s": {"median": 0.01, "min": 0.005, "max": 0.03, "n": 20},
            "detect_to_action_s": {"gpu_fault": 1.2, "node_crash": 3.5},
        }
        for n, v in ((4, 0.8), (16, 0.8))
    ] + [{"nodes": 32, "lamplighter_rpc_per_s": 4.4, "slurmctld_rpc_per_s": 9.0, "jobs_running_at_end": 20}]
    rpc[1]["rpc_from"] = "sdiag by user"
    write(tmp_path, "slurm_rpc_scale", {"nodes": rpc})
    etcd = [
        {
            "hosts": n,
            "etcd_req_per_host_s": v,
            "etcd_req_per_host_s_during_move": 0.6,
            "host_death_to_group_on_spare_s": 8,
        }
        for n, v in ((4, 0.5), (16, 0.4), (64, 0.35))
    ]
    write(tmp_path, "etcd_scale", {"hosts": etcd})
    back = {"quorum_after_s": {"median": 0.5}}
    kill = {"kill": {"survivor_stall_s": {"median": 0.4}}, "rejoin": back}
    hang = {"hang": {"survivor_stall_s": {"median": 0.45}}, "rejoin": back}
    rounds = [kill, kill, hang]
    write(tmp_path, "lighthouse_scale", {"rows": [{"groups": 16, "formation_s": 0.6, "rounds": rounds}]})
    report = sr.build(tmp_path)
    assert [(r["nodes"], r["slurmctld_rpc_per_s"], r["etcd_req_per_host_s"]) for r in report["nodes"]] == [
        (4, 0.8, 0.5),
        (16, 0.8, 0.4),
        (32, 4.4, None),  # measured, but starved: out of the line below
        (64, None, 0.35),  # no Slurm run at 64: null, not filled in
    ]
    assert all(r["head_cycle_s"] is None and r["detect_to_action_s"] is None for r in report["nodes"][2:])
    assert report["nodes"][0]["head_cycle_s"] == 0.01 and report["nodes"][0]["head_cycle_s_max"] == 0.03
    assert report["nodes"][0]["detect_to_action_s"] == {"gpu_fault": 1.2, "node_crash": 3.5}
    assert set(report["not_measured"]) == {"detect_to_action_s.kill", "detect_to_action_s.hang"}
    assert report["lighthouse"] == [
        {
            "groups": 16,
            "quorum_s": 0.6,
            "survivor_stall_kill_s": 0.4,
            "kill_rounds": 2,
            "survivor_stall_hang_s": 0.45,
            "hang_rounds": 1,
            "quorum_after_rejoin_s": 0.5,
            "lighthouse_cpu_cores": None,
        }
    ]
    rpc_line = report["fits"]["slurmctld_rpc_per_s"]
    assert rpc_line["per_unit"] == 0 and rpc_line["projected"]["10000"] == 0.8 and rpc_line["over"] == [4.0, 16.0]
    etcd_line = report["fits"]["etcd_req_per_host_s"]
    assert etcd_line["falling"] and etcd_line["projected"]["10000"] == 0.35  # its largest size's, not below
    assert report["fits"]["survivor_stall_kill_s"] is None  # one group count: no line
    assert report["sources"]["etcd_scale"] == "abc1234"
    # Counted from sdiag's per-user section, a starved size's count is root's alone: it is in the line.
    rpc[2]["rpc_from"] = "sdiag by user"
    rpc[0]["detect_to_action_s"] = {"kill": 1.1, "gpu_fault": 1.2, "node_crash": 3.5}  # a trainer's kill measured
    write(tmp_path, "slurm_rpc_scale", {"nodes": rpc})
    again = sr.build(tmp_path)
    assert again["nodes"][2]["slurm_lab_starved"] and again["nodes"][2]["slurmctld_rpc_by_user"]
    assert again["fits"]["slurmctld_rpc_per_s"]["over"] == [4.0, 16.0, 32.0]
    assert set(again["not_measured"]) == {"detect_to_action_s.hang"}
    assert "| 1.10 s | - | 1.20 s | 3.50 s |" in sr.render_block_of(again)
    assert "RPCs one fault cost" not in sr.render_block_of(again)  # a run from before counted none
    rpc[0]["rpc_per_fault"] = {
        k: {"lamplighter": v} for k, v in (("kill", 3.0), ("gpu_fault", 4.4), ("node_crash", 12.0))
    }
    write(tmp_path, "slurm_rpc_scale", {"nodes": rpc})
    third = sr.build(tmp_path)
    assert third["nodes"][0]["slurmctld_rpc_per_fault"] == {"kill": 3.0, "gpu_fault": 4.4, "node_crash": 12.0}
    assert "| 4 | 3 | - | 4 | 12 |" in sr.render_block_of(third)
    rpc[0]["detect_to_action_s"]["hang"] = 13.1
    rpc[0]["hang_timeout_s"] = 12.0
    write(tmp_path, "slurm_rpc_scale", {"nodes": rpc})
    fourth = sr.render_block_of(sr.build(tmp_path))
    assert "(its hang_timeout_s, 12 s, included)" in fourth and "| 1.10 s | 13.10 s | 1.20 s | 3.50 s |" in fourth


def test_no_result_files_make_an_empty_report_not_an_error(tmp_path: Path, sr: ModuleType) -> None:
    report = sr.build(tmp_path)
    assert report["nodes"] == [] and report["lighthouse"] == [] and report["fits"]["etcd_req_per_host_s"] is None


def test_the_heads_cycle_is_fitted_past_its_sweep_where_it_probes_a_fixed_number(
    tmp_path: Path, sr: ModuleType
) -> None:
    def row(n: int, cycle_ms: float, probed: int) -> dict[str, object]:
        return {
            "nodes": n,
            "lamplighter_rpc_per_s": 0.8,
            "slurmctld_rpc_per_s": 1.0,
            "head_cycle_s": {"median": cycle_ms / 1000, "min": 0.0, "max": 0.04, "n": 30},
            "head_probed_per_cycle": {"median": probed, "min": probed, "max": probed, "n": 30},
            "head_probe_sweep": 8,
        }

    write(tmp_path, "slurm_rpc_scale", {"nodes": [row(4, 0.95, 4), row(16, 1.85, 8), row(64, 1.9, 8)]})
    report = sr.build(tmp_path)
    line = report["fits"]["head_cycle_s"]
    assert line["over"] == [16.0, 64.0] and line["projected"]["10000"] < 0.015  # not 0.12 s through all three
    assert "1.9 [40] ms (8)" in sr.render_block_of(report)
    # A run from before the sweep (every node probed) is fitted over every size, as it grew.
    old = [{k: v for k, v in row(n, c, n).items() if k != "head_probe_sweep"} for n, c in ((4, 1), (16, 3), (64, 13))]
    write(tmp_path, "slurm_rpc_scale", {"nodes": old})
    assert sr.build(tmp_path)["fits"]["head_cycle_s"]["over"] == [4.0, 16.0, 64.0]


def test_times_to_act_struck_several_times_are_reported_as_medians_with_every_sample(
    tmp_path: Path, sr: ModuleType
) -> None:
    def row(n: int, kill: list[float | None], rounds: int | None) -> dict[str, object]:
        got = sorted(v for v in kill if v is not None)
        out: dict[str, object] = {
            "nodes": n,
            "lamplighter_rpc_per_s": 0.8,
            "slurmctld_rpc_per_s": 1.0,
            "detect_to_action_s": {"kill": got[len(got) // 2]},
            "detect_to_action_rounds_s": {"kill": kill},
        }
        return out if rounds is None else {**out, "fault_rounds": rounds}

    write(tmp_path, "slurm_rpc_scale", {"nodes": [row(4, [0.3, 0.9, 0.35], 3), row(64, [0.4, None, 0.5], 3)]})
    report = sr.build(tmp_path)
    assert [r["fault_rounds"] for r in report["nodes"]] == [3, 3]
    assert report["nodes"][1]["detect_to_action_rounds_s"] == {"kill": [0.4, None, 0.5]}  # a miss is kept, as None
    assert "the median of 3 faults of each kind per size): a trainer killed 1.43x" in sr.render_block_of(report)
    assert "exit was seen" not in sr.render_block_of(report)  # no run kept when its daemon saw the exit
    rows = [row(4, [0.3, 0.9, 0.35], 3), row(64, [0.4, None, 0.5], 3)]
    rows[0]["kill_exit_seen_rounds_s"], rows[1]["kill_exit_seen_rounds_s"] = [0.01, 0.02, 0.01], [0.09, None, 0.15]
    write(tmp_path, "slurm_rpc_scale", {"nodes": rows})
    assert "exit was seen by its daemon 0.01-0.02 s at 4, 0.09-0.15 s at 64 after" in sr.render_block_of(
        sr.build(tmp_path)
    )
    # A run from before the rounds struck each fault once, and says so.
    write(tmp_path, "slurm_rpc_scale", {"nodes": [row(4, [0.3], None), row(64, [0.6], None)]})
    single = sr.build(tmp_path)
    assert [r["fault_rounds"] for r in single["nodes"]] == [1, 1]
    assert "each a single fault" in sr.render_block_of(single)
