"""torchft's Slurm example strategy, reimplemented from its source: poll squeue every 10 s, resubmit.

The Lighthouse runs as a plain process next to the runner (the example has
the user start it by hand on the login node; nobody restarts it). Each
replica group is its own Slurm job, built as the example's torchx `dist.ddp`
builds one (poll_script.py): srun of the trainer, no requeue, no restarts
and none of lamplighter's parts, so a failed trainer ends its job. Every
10 s the runner asks squeue which group jobs are RUNNING (the example's
test: a job still pending counts as gone, and is submitted again); a group
whose job is not gets a fresh sbatch submission, and torchft heals it from a
live peer once it joins. There are no health checks: a hung trainer keeps
its job RUNNING, so it is never replaced.
"""

from __future__ import annotations

import itertools
import subprocess
import time
import urllib.request
from pathlib import Path

from bench.baselines.baseline import Baseline
from bench.baselines.poll_script import INJOB_MAX_RESTARTS, has_agent, poll_group_script
from bench.runrecord import Fault
from lamplighter.configs.job_file import job_file_doc
from lamplighter.configs.schema import JobConfig
from lamplighter.lighthouse.spawn import lighthouse_argv
from lamplighter.rundir.contract import RunPaths, write_json_atomic
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.run import SlurmError

POLL_S = 10.0


class PollRunner(Baseline):
    name = "poll-10s"
    max_restarts = 0  # torchrun's restarts inside a group's job: none, as torchx's dist.ddp has it

    def __init__(self, job: JobConfig, api: SlurmActions, run_id: str, python: str) -> None:
        super().__init__(job)
        self.job, self.api, self.run_id, self.python = job, api, run_id, python
        self.submissions: list[tuple[float, int, int]] = []  # (t, group, job id)
        self.jobs: dict[int, int] = {}
        self.scripts: list[Path] = []
        self.lighthouse: subprocess.Popen[bytes] | None = None
        self.address = ""
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
        # Where the benchmark reads it (the groups are told in their environment, as the example's are).
        self.address = f"http://127.0.0.1:{lh.port}"
        write_json_atomic(RunPaths(self.run_dir).lighthouse(), {"address": self.address, "port": lh.port})
        write_json_atomic(self.run_dir / "job.json", job_file_doc(self.job))
        # sbatch's --output folder: Slurm fails a job whose log it cannot create, before the script runs.
        RunPaths(self.run_dir).logs().mkdir(parents=True, exist_ok=True)
        for g in range(self.replicas):
            self._submit(g, time.time())
        self.next_poll = time.time() + POLL_S

    def _submit(self, g: int, now: float) -> None:
        attempt = sum(1 for _, group, _ in self.submissions if group == g)
        script = self.run_dir / "sbatch" / f"group-{g}.{attempt}.sbatch"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(
            poll_group_script(
                self.job,
                g,
                attempt,
                self.run_dir / "job.json",
                self.python,
                self.address,
                max_restarts=self.max_restarts,
            )
        )
        self.scripts.append(script)
        jid = self.api.submit(script)
        self.jobs[g] = jid
        self.submissions.append((now, g, jid))
        self.extra = {
            "submissions": len(self.submissions),
            "agent_in_scripts": sum(1 for p in self.scripts if has_agent(p.read_text())),
        }

    def tick(self, now: float) -> None:
        if now < self.next_poll:
            return
        self.next_poll = now + POLL_S
        try:
            running = {e.job_id for e in self.api.jobs() if e.state == "RUNNING"}
        except SlurmError:
            return  # a slow slurmctld: try at the next poll, as the example would
        for g, jid in list(self.jobs.items()):
            if jid not in running:
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


class InJobRestart(PollRunner):
    """The in-job restart baseline: each group's job, submitted once, runs its trainer under torchrun
    --max-restarts (poll_script.torchrun_argv), the Lighthouse started by hand as the poll runner's; nothing
    watches the queue, so a job that ends (its restarts spent, its node gone) stays ended. No health checks: a
    hung trainer is never replaced."""

    name = "in-job-restart"
    max_restarts = INJOB_MAX_RESTARTS

    def tick(self, now: float) -> None:
        return None


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


def unexplained_resubmissions(submissions: list[tuple[float, int, int]], faults: list[Fault]) -> int:
    """Resubmissions that no fault struck on that group (or on the Lighthouse) since its previous submission
    explains: 0 in a faithful run, where only a failed trainer's ended job brings one about. (A job the
    runner found still pending and submitted again, as the example does, counts here.)"""
    count = 0
    for g in {group for _, group, _ in submissions}:
        times = sorted(t for t, group, _ in submissions if group == g)
        for before, t in itertools.pairwise(times):
            if not any(f.outcome == "struck" and f.index in (g, None) and before < f.t_injected < t for f in faults):
                count += 1
    return count
