"""`submit` returns once the jobs are queued: the Lighthouse job first, the groups `--dependency=after:` it;
`--wait` waits however long the queue is, a line per change, and names a Lighthouse's import error from its log
(as `status` does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.commands.status import collect, format_table
from lamplighter.configs.schema import JobConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.slurm.parsers import JobInfo
from lamplighter.slurm.submit.lighthouse_log import lighthouse_log, lighthouse_log_problem
from lamplighter.slurm.submit.submission import SUBMISSION_FILE, SubmitError, submit_job

IMPORT_ERROR = """\
Traceback (most recent call last):
  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main
ImportError: torchft is not installed in this environment
lamplighter: the Lighthouse exited (1); starting it again
"""


def job(tmp: Path, name: str = "q") -> JobConfig:
    run = tmp / "run $(touch pwned) 'q'"
    return JobConfig.model_validate({"name": name, "run_dir": str(run), "groups": {"count": 2}})


def blocker(api: FakeSlurm, tmp: Path) -> int:
    """Someone else's job on the only free node: the queue is busy."""
    script = tmp / "other.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=other\n#SBATCH --nodes=1\n")
    return api.submit(script, user_id=1000)


def never(_addr: str) -> object:
    raise AssertionError("submit without --wait asks the Lighthouse nothing")


def test_submit_returns_once_queued_and_the_groups_wait_for_the_lighthouse_job(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3"])
    other = blocker(api, tmp_path)
    blocker(api, tmp_path), blocker(api, tmp_path)  # every node busy
    said: list[str] = []
    sub = submit_job(job(tmp_path), api, config_path="x.yaml", probe=never, say=said.append)
    assert sub.lighthouse_job_id == 4 and sub.groups == {0: 5, 1: 6} and sub.lighthouse_address == ""
    assert said == ["Lighthouse job 4 submitted", "group jobs 5, 6 submitted (after:4)"]
    assert (Path(sub.run_dir) / SUBMISSION_FILE).exists() and (Path(sub.run_dir) / "job.json").exists()
    assert [(api.job(j).state, api.job(j).reason) for j in (4, 5, 6)] == [
        ("PENDING", "Resources"),
        ("PENDING", "Dependency"),  # a free node is no reason to start before the Lighthouse job
        ("PENDING", "Dependency"),
    ]
    api.finish(other)  # one node frees: the Lighthouse job takes it, and only then may a group start
    assert api.job(4).state == "RUNNING" and api.job(5).reason == "Resources"
    assert not (tmp_path / "pwned").exists()


class Queue(FakeSlurm):
    """A fake whose queue frees after the Lighthouse job has been seen PENDING `polls` times."""

    def __init__(self, polls: int) -> None:
        super().__init__(["n1", "n2", "n3"])
        self.polls, self.seen_pending = polls, 0
        self.blockers: list[int] = []

    def job(self, job_id: int) -> JobInfo:
        info = super().job(job_id)
        if info.name.endswith("-lighthouse") and info.state == "PENDING":
            self.seen_pending += 1
            if self.seen_pending == self.polls:
                for b in self.blockers:
                    self.finish(b)
        return info


def test_wait_outlasts_a_busy_queue_and_says_each_change_once(tmp_path: Path) -> None:
    api = Queue(polls=8)
    api.blockers = [blocker(api, tmp_path) for _ in range(3)]
    said: list[str] = []
    sub = submit_job(
        job(tmp_path),
        api,
        config_path="x.yaml",
        probe=lambda a: None,
        read_address=lambda r, j: "http://n1:29510",
        wait=True,
        lighthouse_timeout=0.01,  # counts from when its job runs, never while it is queued
        say=said.append,
    )
    assert api.seen_pending == 8 and sub.lighthouse_address == "http://n1:29510"
    assert said == [
        "Lighthouse job 4 submitted",
        "group jobs 5, 6 submitted (after:4)",
        "Lighthouse job 4: PENDING (Resources)",
        "Lighthouse job 4: answers at http://n1:29510",
    ]


def test_an_import_error_in_the_lighthouse_job_is_named_by_submit_wait_and_by_status(tmp_path: Path) -> None:
    api = FakeSlurm(["n1", "n2", "n3"])
    j = job(tmp_path)
    sub = submit_job(j, api, config_path="x.yaml", probe=never)
    run_dir = Path(sub.run_dir)
    assert sub.lighthouse_job_id is not None
    log = lighthouse_log(run_dir, sub.lighthouse_job_id)
    log.write_text(IMPORT_ERROR * 3)
    problem = lighthouse_log_problem(run_dir, sub.lighthouse_job_id)
    assert problem is not None and problem.error == "ImportError: torchft is not installed in this environment"
    assert problem.exits == 3 and problem.status == 1
    st = collect(sub, api, now=1.0, lighthouse_timeout=0.1)
    assert "ImportError: torchft is not installed in this environment" in format_table(st)
    assert "slurm.helper_python" in st["quorum_error"]
    # Submitting again with --wait: it fails at once, naming the error, and cancels what it queued.
    for jid in sub.all_job_ids():
        api.cancel(jid)
    said: list[str] = []

    def crashing(run: Path, job_id: int) -> None:
        lighthouse_log(run, job_id).write_text(IMPORT_ERROR)

    with pytest.raises(SubmitError, match=r"ImportError: torchft is not installed in this environment; exit 1"):
        submit_job(
            j,
            api,
            config_path="x.yaml",
            probe=never,
            read_address=lambda r, jid: crashing(r, jid),
            wait=True,
            say=said.append,
        )
    assert [api.job(x).state for x in (4, 5, 6)] == ["CANCELLED"] * 3
    assert not (run_dir / SUBMISSION_FILE).exists()


def test_a_log_without_exits_or_unreadable_names_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    log = lighthouse_log(run, 7)
    log.parent.mkdir(parents=True)
    assert lighthouse_log_problem(run, 7) is None  # no log yet
    log.write_text("lamplighter release: waiting for the submission record\n")
    assert lighthouse_log_problem(run, 7) is None
    log.unlink()
    (tmp_path / "elsewhere").write_text(IMPORT_ERROR)
    log.symlink_to(tmp_path / "elsewhere")
    assert lighthouse_log_problem(run, 7) is None  # a link is never followed
    log.unlink()
    import os

    os.mkfifo(log)
    assert lighthouse_log_problem(run, 7) is None  # a FIFO neither blocks nor counts


def test_a_submitted_group_that_starts_before_its_lighthouse_published_waits_for_the_address(tmp_path: Path) -> None:
    """--dependency=after: lets a group start as soon as the Lighthouse job has, before its Lighthouse has bound:
    the group's in-job agent waits for the address (not the config's fixed one), then starts the trainer."""
    import json
    import os
    import subprocess
    import sys

    from test_slurm_render import FAKE_SRUN, RECORDER, publish

    from lamplighter.rundir import contract
    from lamplighter.slurm.submit.render import render_job

    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "srun").write_text(FAKE_SRUN)
    (shim / "srun").chmod(0o755)
    recorder = tmp_path / "recorder.py"
    recorder.write_text(RECORDER)
    run = tmp_path / "run $(touch pwned)"
    j = JobConfig(
        name="w",
        run_dir=str(run),
        trainer={"command": [sys.executable, str(recorder)]},
        # A fixed address exists, but it is not taken before the job's own publishes.
        lighthouse={"host": "n1", "port": 29533},
        slurm={"head_node": "n1"},
    )
    script = render_job(j, tmp_path / "out")[1]
    (run / SUBMISSION_FILE).write_text("{}")  # started by `lamplighter submit`
    out = tmp_path / "r.json"
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "RECORD_TO": str(out), "SLURM_JOB_ID": "7"}
    proc = subprocess.Popen(["bash", str(script)], env=env, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert "waiting up to 300 s for this job's Lighthouse to publish its address" in first, first
        assert not out.exists()  # no trainer before the address
        publish(run)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 0, rest
    finally:
        if proc.poll() is None:
            proc.kill()
    assert json.loads(out.read_text())["env"]["TORCHFT_LIGHTHOUSE"] == "http://n1:4242"
    assert contract.RunPaths(run).lighthouse().exists() and not (tmp_path / "pwned").exists()
