"""Requeue-and-start-now of a multi-node group keeps it off every node of its last allocation.

Regression: only the node that saw the failure was excluded. Slurm revokes a job's credential on
every node it ran on, so a 2-node group started at once on its other node was killed for good and
never came back (seen on the test cluster with the reference trainer, 2 nodes x 2 processes).
"""

from __future__ import annotations

from pathlib import Path

from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.slurm.requeue import requeue_elsewhere


class RecordingUpdater:
    """What `scontrol update` would be asked, and the job's own batch script (no --exclude of its own)."""

    def __init__(self, api: FakeSlurm) -> None:
        self.api = api
        self.updates: list[dict[str, str]] = []

    def update_job(self, job_id: int, settings: dict[str, str]) -> None:
        self.updates.append(settings)

    def batch_script(self, job_id: int) -> str:
        return "#!/bin/bash\n#SBATCH --nodes=2\n"


def test_a_two_node_group_is_kept_off_both_of_its_last_nodes(tmp_path: Path) -> None:
    # As the real Slurm does: a requeued job waits (BeginTime) until someone starts it.
    api = FakeSlurm(["n1", "n2", "n3", "n4", "n5"], begin_delay_s=100.0, completing_s=0.0)
    script = tmp_path / "g.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=ll-j-g0\n#SBATCH --nodes=2\n#SBATCH --requeue\n")
    job = api.submit(script)
    first = api.job(job).node_list
    assert first == "n1,n2"
    upd = RecordingUpdater(api)
    result = requeue_elsewhere(api, upd, job, "n2", start_at=0.0, now=0.0, attempt=0)
    assert result["requeue"].startswith("requeued")
    # Both nodes it ran on, not only the one that saw the failure.
    assert upd.updates == [{"ExcNodeList": "n2,n1", "StartTime": "now"}]


class HeadExcludingUpdater(RecordingUpdater):
    def batch_script(self, job_id: int) -> str:
        return "#!/bin/bash\n#SBATCH --exclude=n1\n"


def test_a_group_with_nowhere_else_to_start_is_left_to_slurm(tmp_path: Path) -> None:
    """Regression (the torchtitan Slurm test): the lab's head node n1, which the groups exclude themselves, and
    n2, fully taken by the other group, were counted as places to go, so the requeued group was kept off its
    own node n3 and pended until the other group ended. Neither can start it now: Slurm places it."""
    api = FakeSlurm(["n1", "n2", "n3"], begin_delay_s=100.0, completing_s=0.0)
    script = tmp_path / "g.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=ll-j-g0\n#SBATCH --requeue\n")
    head, other, job = api.submit(script), api.submit(script), api.submit(script)
    assert [api.job(j).node_list for j in (head, other, job)] == ["n1", "n2", "n3"]
    api.cancel(head)  # n1 idle, but the group excludes it
    upd = HeadExcludingUpdater(api)
    result = requeue_elsewhere(api, upd, job, "n3", start_at=0.0, now=0.0, attempt=0)
    assert upd.updates == [] and result["start"].startswith("left to Slurm"), result
    # Once a node it may use is free, it is kept off n3 and started there at once.
    api.cancel(other)
    api.start_now(job)
    upd2 = HeadExcludingUpdater(api)
    requeue_elsewhere(api, upd2, job, "n3", start_at=0.0, now=0.0, attempt=1)
    assert upd2.updates == [{"ExcNodeList": "n1,n3", "StartTime": "now"}]
