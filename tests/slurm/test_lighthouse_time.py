"""The Lighthouse job's limit at its partition's MaxTime (slurm/submit/lighthouse_time.py): a Lighthouse that need not
renew never waits in a busy queue mid-run (issue #41, busy queues). Parsed from recorded `scontrol show
partition` (Slurm 22.05, the lab's two partitions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lamplighter.configs.schema import JobConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.slurm.parsers import PartitionInfo, parse_scontrol_partitions
from lamplighter.slurm.submit.lighthouse_time import lighthouse_time
from lamplighter.slurm.submit.submission import submit_job

RECORDED = Path(__file__).parent / "recorded" / "scontrol_show_partition.txt"


def job(**slurm: Any) -> JobConfig:
    return JobConfig.model_validate({"name": "j", "slurm": {"time": "01:00:00", **slurm}})


def test_partitions_parse_from_recorded_scontrol() -> None:
    parts = parse_scontrol_partitions(RECORDED.read_text())
    assert [(p.name, p.max_time, p.default) for p in parts] == [
        ("debug", "UNLIMITED", True),
        ("urgent", "UNLIMITED", False),
    ]


@pytest.mark.parametrize(
    ("settings", "max_time", "want"),
    [
        ({}, "UNLIMITED", "UNLIMITED"),  # the default partition's
        ({}, "2-00:00:00", "2-00:00:00"),
        ({}, "01:00:00", None),  # no longer than slurm.time: it renews as before
        ({}, "00:30:00", None),
        ({"lighthouse_time": "03:00:00"}, "UNLIMITED", None),  # the user's, kept
        ({"renewal": {"enabled": False}}, "UNLIMITED", None),  # nothing renews
        ({}, "garbage", None),
    ],
)
def test_the_lighthouse_takes_the_partition_limit_only_where_it_spares_a_renewal(
    settings: dict[str, Any], max_time: str, want: str | None
) -> None:
    got = lighthouse_time(job(**settings), [PartitionInfo("gpu", max_time, True)])
    assert got.time == want, got.why


def test_the_lighthouse_partition_is_the_one_asked() -> None:
    parts = [PartitionInfo("gpu", "01:00:00", True), PartitionInfo("cpu", "UNLIMITED", False)]
    assert lighthouse_time(job(lighthouse_partition="cpu"), parts).time == "UNLIMITED"
    assert lighthouse_time(job(partition="gpu"), parts).time is None
    missing = lighthouse_time(job(partition="nope"), parts)
    assert missing.time is None and "nope not found" in missing.why


def test_submit_renders_the_lighthouse_job_with_the_partition_limit(tmp_path: Path) -> None:
    slurm = FakeSlurm()
    said: list[str] = []
    cfg = job().model_copy(update={"run_dir": str(tmp_path / "run")})
    sub = submit_job(cfg, slurm, config_path=str(tmp_path / "j.yaml"), say=said.append)
    script = (Path(sub.run_dir) / "sbatch" / "lighthouse.sbatch").read_text()
    assert '#SBATCH --time="UNLIMITED"' in script and "--signal=B:USR1" not in script
    group = (Path(sub.run_dir) / "sbatch" / "group-0.sbatch").read_text()
    assert '#SBATCH --time="01:00:00"' in group  # the groups keep slurm.time and renew
    assert any("MaxTime UNLIMITED" in line for line in said), said
