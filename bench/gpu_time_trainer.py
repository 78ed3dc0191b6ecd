"""The reference trainer paced to a fixed step period, as on an accelerator: `python -m bench.gpu_time_trainer`.

Every "node" of the benchmark shares this machine's 2 cores, so when a replica group dies its peers get its
CPU and would run faster: degraded running would look nearly free, which it is not on a cluster where each
group has its own GPUs. Each forward pass here starts on a deadline, BENCH_STEP_PERIOD_S after the last one
(the step's CPU work fits well inside it), and a late step starts a new phase instead of catching up, so a
group's step period does not depend on how many peers run. The checkpoint-restart trainer is paced the same
(bench.baselines.ckpt_trainer); the overhead benchmark is not.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

ENV_STEP_S = "BENCH_STEP_PERIOD_S"
ENV_PORT_FROM_JOB = "BENCH_PORT_FROM_JOB"  # under Slurm: the store's port from the job (see bench.jobspec)


def port_from_job(env: dict[str, str]) -> str:
    """A port the Slurm clusters sharing this machine never hand out, new per job and per requeue."""
    return str(29600 + (int(env["SLURM_JOB_ID"]) * 7 + int(env.get("SLURM_RESTART_COUNT") or 0)) % 400)


class Pacer:
    """Deadlines period_s apart; a step that comes late starts a new phase (an accelerator cannot catch up)."""

    def __init__(self, period_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.period_s, self.clock = period_s, clock
        self.next_at: float | None = None

    def wait_s(self) -> float:
        """How long the step due now waits for its deadline; the deadline after it moves one period on."""
        now = self.clock()
        wait = 0.0 if self.next_at is None else max(0.0, self.next_at - now)
        self.next_at = now + wait + self.period_s
        return wait


def pace_steps(period_s: float) -> None:
    """Make lamplighter.trainer.model.lm_loss start on a deadline every period_s (the trainers import it at call
    time)."""
    if period_s <= 0:
        return
    from lamplighter.trainer import model

    compute, pacer = model.lm_loss, Pacer(period_s)

    def lm_loss(model: Any, tokens: Any) -> Any:
        time.sleep(pacer.wait_s())
        return compute(model, tokens)

    model.lm_loss = lm_loss


def main() -> int:
    if os.environ.get(ENV_PORT_FROM_JOB) and "SLURM_JOB_ID" in os.environ:
        os.environ["MASTER_PORT"] = port_from_job(dict(os.environ))
    pace_steps(float(os.environ.get(ENV_STEP_S, "0") or 0))
    from lamplighter.trainer.main import main as trainer_main

    return trainer_main()


if __name__ == "__main__":
    raise SystemExit(main())
