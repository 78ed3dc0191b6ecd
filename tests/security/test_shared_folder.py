"""The shared status folder with a real second user: the job table shows a user no more than squeue would
(PrivateData=jobs: 0600), and a folder owned by a dedicated user is taken when node.yaml names that user."""

from __future__ import annotations

import os
import time
from pathlib import Path

from conftest import Tenant

from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.supervisor.job_table import FILE_MODE, PRIVATE_MODE, TABLE_FILE, JobTable, publish, table_doc


def table(folder: Path, mode: int) -> Path:
    slurm = FakeSlurm(["n1"])
    script = folder / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=ll-secret-run-g0\nexec sleep 1\n")
    job = slurm.submit(script)
    publish(folder, table_doc(time.time(), "head", {job: slurm.job(job)}), mode)
    return folder / TABLE_FILE


def test_a_user_reads_the_table_only_when_squeue_would_show_them_the_jobs(tenant: Tenant) -> None:
    shared = tenant.home / "status-shared"
    shared.mkdir(exist_ok=True)
    shared.chmod(0o755)
    path = table(shared, FILE_MODE)
    assert "ll-secret-run-g0" in tenant.run(["cat", str(path)]).stdout  # PrivateData none: as squeue
    path = table(shared, PRIVATE_MODE)
    denied = tenant.run(["cat", str(path)], check=False)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    assert JobTable(shared, 15.0).lookup([1]) is not None  # root, the daemons' user, still reads it


def test_a_folder_of_a_dedicated_user_is_taken_from_that_user_only(tenant: Tenant) -> None:
    """The tenant stands in for the dedicated `lamplighter` user the slurmdbd setup runs the daemons as."""
    shared = tenant.folder("status-dedicated")
    path = table(shared, PRIVATE_MODE)
    os.chown(path, tenant.uid, tenant.gid)  # as the dedicated user's head writes it
    assert JobTable(shared, 15.0, owner=tenant.uid).lookup([1]) is not None
    refused = JobTable(shared, 15.0)  # the default owner, root: refused, and why
    assert refused.lookup([1]) is None and f"belongs to uid {tenant.uid}, not to uid 0" in str(refused.refused)
