"""On the real Slurm 22.05 lab: `submit` returns once queued and the groups wait for the Lighthouse job
(`--dependency=after:`); a Lighthouse whose interpreter lacks torchft is named by `status` and `submit --wait`."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_slurm_lifecycle import cli, write_config

from lamplighter.commands.status import collect
from lamplighter.lab.slurm_lab import leftover_job_processes
from lamplighter.lab.testcluster import TestCluster, wait_until
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import read_steps
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.submit.submission import SUBMISSION_FILE, find_run_dir, load

pytestmark = pytest.mark.integration


def squeue(cluster: TestCluster, job_id: int) -> tuple[str, str]:
    out = cluster.cli().run("squeue", "-h", "-j", str(job_id), "-o", "%T %r")
    state, reason = out.split(maxsplit=1)
    return state, reason.strip()


@pytest.mark.heavy(seconds=30)
def test_submit_returns_on_a_busy_queue_and_groups_start_after_the_lighthouse_job(
    cluster: TestCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = SlurmActions(cluster.cli())
    blocker_script = tmp_path / "blocker.sbatch"
    blocker_script.write_text(
        "#!/bin/bash\n#SBATCH --job-name=other\n#SBATCH --nodelist=n1\n#SBATCH --exclusive\n"
        f'#SBATCH --output="{tmp_path}/other-%j.out"\nsleep 600\n'
    )
    blocker = api.submit(blocker_script)
    wait_until(lambda: api.job(blocker).state == "RUNNING", 30, "the other job to hold n1")
    config = write_config(tmp_path, "busy", 1_000_000, cluster.conf_path)  # its Lighthouse pinned to n1
    assert cli("submit", str(config)) == 0  # returns although its Lighthouse cannot start
    out = capsys.readouterr()
    assert "starts after the Lighthouse job has started" in out.out and "submitted (after:" in out.err
    sub = load(find_run_dir(str(config)))
    assert sub.lighthouse_job_id is not None
    assert squeue(cluster, sub.lighthouse_job_id)[0] == "PENDING"
    # n2 and n3 are free, yet Slurm holds the groups until the Lighthouse job has started.
    assert [squeue(cluster, j) for j in sub.groups.values()] == [("PENDING", "Dependency")] * 2
    api.cancel(blocker)
    paths = RunPaths(Path(sub.run_dir))
    wait_until(
        lambda: all(any(r.committed and r.participants == 2 for r in read_steps(paths.steps(g))) for g in sub.groups),
        120,
        "both groups to commit together, on the address the Lighthouse published",
    )
    assert cli("cancel", "--run-dir", sub.run_dir, "busy") == 0
    wait_until(lambda: not leftover_job_processes("busy"), 30, "the job's processes to exit")


NO_TORCHFT = """\
#!/bin/bash
# The Lighthouse's node's interpreter without torchft: lamplighter's Lighthouse runs, torchft is missing.
if [[ "$2" == lamplighter.lighthouse.main ]]; then
    export PYTHONPATH={site}
    exec /usr/bin/python3 -S "$@"
fi
exec {python} "$@"
"""


@pytest.mark.heavy(seconds=20)
def test_a_lighthouse_without_torchft_is_named_by_status_and_by_submit_wait(
    cluster: TestCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import lamplighter

    site = tmp_path / "site"
    site.mkdir()
    (site / "lamplighter").symlink_to(Path(lamplighter.__file__).parent)
    helper = tmp_path / "venv 'q' $(touch pwned)" / "python3"
    helper.parent.mkdir()
    helper.write_text(NO_TORCHFT.format(site=shlex.quote(str(site)), python=shlex.quote(sys.executable)))
    helper.chmod(0o755)
    config = write_config(tmp_path, "nott", 1_000_000, cluster.conf_path)
    cfg = yaml.safe_load(config.read_text())
    cfg["slurm"]["helper_python"] = str(helper)
    config.write_text(yaml.safe_dump(cfg))
    assert cli("submit", str(config)) == 0
    sub = load(find_run_dir(str(config)))
    api = SlurmActions(cluster.cli())
    error = "ImportError: torchft is not installed in this environment"

    def named() -> dict[str, Any] | None:
        st = collect(sub, api, now=0.0, lighthouse_timeout=0.5)
        return st if error in (st["quorum_error"] or "") else None

    st = wait_until(named, 60, "status to name the Lighthouse's import error")
    assert "slurm.helper_python" in st["quorum_error"]
    assert cli("cancel", "--run-dir", sub.run_dir, "nott") == 0
    capsys.readouterr()
    # submit --wait: it fails naming the error from the log, and leaves nothing queued.
    assert cli("submit", "--wait", str(config)) == 1
    err = capsys.readouterr().err
    # The states it saw, each once: PENDING only if Slurm had not started the job by the first poll (in CI it had:
    # RUNNING was the first state seen), and a Lighthouse that exits at once may be gone by the next one.
    seen = [line for line in err.splitlines() if re.search(r"Lighthouse job \d+: (PENDING|RUNNING)", line)]
    assert seen and len(seen) == len(set(seen)), err
    assert error in err and "runs on" in err, err
    assert not (Path(sub.run_dir) / SUBMISSION_FILE).exists()
    assert not [e for e in api.jobs("ll-nott") if e.state in ("PENDING", "RUNNING")]
    assert not (tmp_path / "pwned").exists()
    wait_until(lambda: not leftover_job_processes("nott"), 30, "the job's processes to exit")
