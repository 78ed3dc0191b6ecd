"""torchft's Slurm example strategy, reimplemented from its description: poll squeue every 10 s, resubmit.

The Lighthouse runs as a plain process next to the runner (the example has
the user start it by hand on the login node; nobody restarts it). Each
replica group is its own Slurm job running the reference trainer (the same
sbatch scripts lamplighter renders, without --requeue). Every 10 s the runner
asks squeue which group jobs are still queued or running; a group whose job
is gone gets a fresh sbatch submission, and torchft heals it from a live
peer once it joins. There are no health checks: a hung trainer keeps its job
RUNNING, so it is never replaced.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

from bench.baselines.baseline import Baseline
from lamplighter.configs.schema import JobConfig
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.render import render_job
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.lighthouse.lighthouse import lighthouse_argv
from lamplighter.trainer.contract import RunPaths, write_json_atomic

POLL_S = 10.0


class PollRunner(Baseline):
    name = "poll-10s"

    def __init__(self, job: JobConfig, api: SlurmActions, run_id: str, python: str) -> None:
        super().__init__(job)
        self.job, self.api, self.run_id, self.python = job, api, run_id, python
        self.submissions: list[tuple[float, int, int]] = []  # (t, group, job id)
        self.jobs: dict[int, int] = {}
        self.scripts: list[Path] = []
        self.lighthouse: subprocess.Popen[bytes] | None = None
        self.next_poll = 0.0

    def start(self) -> None:
        lh = self.job.lighthouse
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.run_dir / "lighthouse.log", "ab")  # noqa: SIM115 - handed to the child
        self.lighthouse = subprocess.Popen(
            lighthouse_argv(lh, lh.port, [str(Path(self.python).parent / "torchft_lighthouse")], bind_host="127.0.0.1"),
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        wait_http(f"http://127.0.0.1:{lh.port}/", 60.0)
        # Where the groups' agents read it (the job names no host): this arm's cluster shares this machine's loopback.
        write_json_atomic(
            RunPaths(self.run_dir).lighthouse(), {"address": f"http://127.0.0.1:{lh.port}", "port": lh.port}
        )
        # Its group scripts only: here the Lighthouse is the plain process above, not a Slurm job.
        self.scripts = group_scripts(render_job(self.job, self.run_dir / "sbatch", python=self.python), self.replicas)
        for g in range(self.replicas):
            self._submit(g, time.time())
        self.next_poll = time.time() + POLL_S

    def _submit(self, g: int, now: float) -> None:
        jid = self.api.submit(self.scripts[g])
        self.jobs[g] = jid
        self.submissions.append((now, g, jid))

    def tick(self, now: float) -> None:
        if now < self.next_poll:
            return
        self.next_poll = now + POLL_S
        try:
            queued = {e.job_id for e in self.api.jobs()}
        except SlurmError:
            return  # a slow slurmctld: try at the next poll, as the example would
        for g, jid in self.jobs.items():
            if jid not in queued:
                self.detections.append((now, g))
                self._submit(g, now)

    def stop(self) -> None:
        for jid in self.jobs.values():
            try:
                self.api.cancel(jid)
            except SlurmError:
                pass
        if self.lighthouse is not None:
            self.lighthouse.kill()
            self.lighthouse.wait(10)


def group_scripts(rendered: list[Path], groups: int) -> list[Path]:
    """The sbatch script of each group, in group order, from everything render_job wrote."""
    by_name = {p.name: p for p in rendered}
    missing = [f"group-{g}.sbatch" for g in range(groups) if f"group-{g}.sbatch" not in by_name]
    if missing:
        raise RuntimeError(f"render_job wrote {sorted(by_name)}, not {missing}")
    return [by_name[f"group-{g}.sbatch"] for g in range(groups)]


def wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
