"""The checkpoint-and-restart strategy: one Slurm job of N ranks, requeued whole on any fault.

The job runs bench.baselines.ckpt_trainer on N nodes (one rank each) under
`srun --kill-on-bad-exit`, so one dead rank ends the whole step; a hung rank
makes its peers' allreduce time out (the same 3 s process-group timeout the
torchft strategies use), which ends it too. A careful user's watcher polls
the job every WATCH_S and, when it failed, requeues it and lifts Slurm's
requeue hold (`scontrol requeue` + StartTime=now); a node failure is requeued
by Slurm itself (--requeue) and the watcher only lifts the hold. Every rank
then resumes from the last checkpoint.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from bench.baselines.baseline import Baseline
from lamplighter.configs.job_file import job_file_doc
from lamplighter.configs.schema import JobConfig
from lamplighter.rundir import contract
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.requeue import requeue_now
from lamplighter.slurm.run import SlurmError

WATCH_S = 0.5
FAILED = frozenset({"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "CANCELLED", "PREEMPTED"})
TASK_WRAPPER = 'export RANK="$SLURM_PROCID" WORLD_SIZE="$SLURM_NTASKS"; exec "$@"'


def render_script(job: JobConfig, run_dir: Path, python: str, mtbf_s: float | None, repo: Path) -> str:
    """mtbf_s: the MTBF its Young/Daly interval is chosen for; None: plain DDP, no checkpoint at all."""
    argv = [python, "-m", "bench.baselines.ckpt_trainer", "--config", str(run_dir / "job.json")]
    argv += ["--mtbf-s", str(mtbf_s)] if mtbf_s is not None else ["--no-checkpoint"]
    env = {**job.trainer.env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo), contract.ENV_RUN_DIR: str(run_dir)}
    return "\n".join(
        [
            "#!/bin/bash",
            f"#SBATCH --job-name=ckpt-{job.name}",
            f"#SBATCH --nodes={job.groups.count}",
            "#SBATCH --ntasks-per-node=1",
            "#SBATCH --requeue",
            "#SBATCH --exclusive",
            "#SBATCH --open-mode=append",
            f"#SBATCH --output={run_dir / 'logs'}/ckpt-%j.out",
            f"#SBATCH --chdir={repo}",
            "set -euo pipefail",
            *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
            "export MASTER_ADDR=127.0.0.1",
            # A new port per run of the job: the last run's store may still hold its port.
            'export MASTER_PORT="$((31000 + (SLURM_JOB_ID * 16 + ${SLURM_RESTART_COUNT:-0}) % 1500))"',
            f"exec srun --kill-on-bad-exit=1 bash -c {shlex.quote(TASK_WRAPPER)} ckpt-task \\",
            "    " + " ".join(shlex.quote(a) for a in argv),
            "",
        ]
    )


class CheckpointRestart(Baseline):
    """mtbf_s None: the same job without checkpoints (plain DDP), the benchmark's fault-free yardstick."""

    name = "ckpt-restart"

    def __init__(
        self,
        job: JobConfig,
        api: SlurmActions,
        run_id: str,
        python: str = sys.executable,
        mtbf_s: float | None = None,
        repo: Path | None = None,
    ) -> None:
        super().__init__(job)
        if mtbf_s is None:
            self.name = "ddp"
        self.job, self.api, self.run_id, self.python, self.mtbf_s = job, api, run_id, python, mtbf_s
        self.repo = repo or Path(__file__).resolve().parent.parent.parent
        self.requeues: list[float] = []
        self.job_id: int | None = None
        self.next_watch = 0.0

    def start(self) -> None:
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        contract.write_json_atomic(self.run_dir / "job.json", job_file_doc(self.job))
        script = self.run_dir / "ckpt.sbatch"
        script.write_text(render_script(self.job, self.run_dir, self.python, self.mtbf_s, self.repo))
        self.job_id = self.api.submit(script)

    def tick(self, now: float) -> None:
        if now < self.next_watch or self.job_id is None:
            return
        self.next_watch = now + WATCH_S
        try:
            info = self.api.job(self.job_id)
        except SlurmError:
            return
        if info.state in FAILED:
            self.detections.append((now, None))
            try:
                requeue_now(self.api, self.job_id)
                self.requeues.append(now)
            except (SlurmError, TimeoutError):
                pass  # try again at the next watch
        elif info.state == "PENDING" and info.restarts > len(self.requeues):
            # Slurm requeued it itself (node failure): lift the BeginTime hold.
            self.detections.append((now, None))
            self.requeues.append(now)
            try:
                self.api.start_now(self.job_id)
            except (SlurmError, TimeoutError):
                pass

    def stop(self) -> None:
        if self.job_id is not None:
            try:
                self.api.cancel(self.job_id)
            except SlurmError:
                pass
