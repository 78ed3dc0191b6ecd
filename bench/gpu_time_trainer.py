"""The reference trainer with a fixed simulated accelerator time per step: `python -m bench.gpu_time_trainer`.

Every "node" of the benchmark shares this machine's 2 cores, so when a replica
group dies its peers get its CPU and run faster: degraded running would look
nearly free, which it is not on a cluster where each group has its own GPUs.
Here every forward pass first waits BENCH_GPU_STEP_S seconds (the accelerator's
share of a step, not using the CPU), so a group's step time no longer depends
on how many peers are running. The checkpoint-restart trainer takes the same
wait (bench.baselines.ckpt_trainer); the overhead benchmark takes none.
"""

from __future__ import annotations

import os
import time
from typing import Any

ENV_STEP_S = "BENCH_GPU_STEP_S"
ENV_PORT_FROM_JOB = "BENCH_PORT_FROM_JOB"  # under Slurm: the store's port from the job (see bench.jobspec)


def port_from_job(env: dict[str, str]) -> str:
    """A port the Slurm clusters sharing this machine never hand out, new per job and per requeue."""
    return str(29600 + (int(env["SLURM_JOB_ID"]) * 7 + int(env.get("SLURM_RESTART_COUNT") or 0)) % 400)


def add_gpu_time(step_s: float) -> None:
    """Make lamplighter.trainer.model.lm_loss wait step_s first (the trainers import it at call time)."""
    if step_s <= 0:
        return
    from lamplighter.trainer import model

    compute = model.lm_loss

    def lm_loss(model: Any, tokens: Any) -> Any:
        time.sleep(step_s)
        return compute(model, tokens)

    model.lm_loss = lm_loss


def main() -> int:
    if os.environ.get(ENV_PORT_FROM_JOB) and "SLURM_JOB_ID" in os.environ:
        os.environ["MASTER_PORT"] = port_from_job(dict(os.environ))
    add_gpu_time(float(os.environ.get(ENV_STEP_S, "0") or 0))
    from lamplighter.trainer.main import main as trainer_main

    return trainer_main()


if __name__ == "__main__":
    raise SystemExit(main())
