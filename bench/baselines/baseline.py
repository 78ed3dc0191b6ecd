"""What both baselines share as a SlurmStrategy (bench/slurm_drive.py)."""

from __future__ import annotations

from pathlib import Path

from lamplighter.configs.schema import JobConfig


class Baseline:
    """A job's run directory and groups, the failures noticed; no counts for the run's record, and nothing that
    outlives the trainers (which `drive` waits for), so nothing to settle after a run."""

    def __init__(self, job: JobConfig) -> None:
        assert job.run_dir is not None
        self.run_dir = Path(job.run_dir)
        self.replicas = job.groups.count
        self.detections: list[tuple[float, int | None]] = []
        self.extra: dict[str, int] = {}

    def settle(self) -> None:
        return None
