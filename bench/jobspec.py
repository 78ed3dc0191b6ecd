"""The one job every strategy trains: the same model, data, replica count and torchft timeouts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.gpu_time_trainer import ENV_PORT_FROM_JOB, ENV_STEP_S
from lamplighter.configs.schema import JobConfig

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "bench"

HANG_TIMEOUT_S = 5  # every lamplighter arm's health.hang_timeout_s (fault_cost.json records it for plan)


# No step target: a run trains until the harness ends it, a fixed window after its first commit.
UNTIL_STOPPED = 1_000_000


@dataclass(frozen=True)
class Workload:
    steps: int = UNTIL_STOPPED
    replicas: int = 3
    dim: int = 128
    layers: int = 2
    heads: int = 4
    seq_len: int = 64
    batch_size: int = 16
    step_period_s: float = 0.5  # every step starts this long after the last (bench.gpu_time_trainer)
    # State every replica holds besides the model, standing in for a large optimizer state: lamplighter's
    # groups send it with every heal (trainer.model.heal_pad_mb), the checkpoint-restart trainer writes it into
    # every checkpoint and reads it back on every restart.
    state_pad_mb: int = 0
    # Both torchft strategies keep the fallback checkpoint, at the same interval: when no live peer is left
    # (every group down at once), a group restarts from it and the steps since are redone (counted as lost).
    fallback_interval_s: float = 10.0

    def model(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "layers": self.layers,
            "heads": self.heads,
            "seq_len": self.seq_len,
            "batch_size": self.batch_size,
            "heal_pad_mb": self.state_pad_mb,
        }


# The rendered sbatch scripts put group rank 0's TCPStore on 30000 + job id % 2000. Several Slurm clusters
# share this one machine (the lab per run, the baselines' cluster, other test suites), all numbering jobs
# from 1, so that port is often taken. Under Slurm the trainer therefore picks its port itself, from a
# range those never use (bench.gpu_time_trainer, ENV_PORT_FROM_JOB): a plain `python -m` command, which a
# group's in-job spare (slurm.spare) can run.
LOCAL_TRAINER = ["{python}", "-m", "bench.gpu_time_trainer", "--config", "{config}"]


def job_config(
    name: str,
    run_dir: Path,
    w: Workload,
    *,
    run_id: str,
    lighthouse_port: int = 0,
    slurm_conf: str | None = None,
    requeue: bool = True,
    under_slurm: bool = False,
) -> JobConfig:
    """The job, with lamplighter's tuned torchft settings (those of configs/demo.yaml) for every strategy."""
    return JobConfig.model_validate(
        {
            "name": name,
            "run_dir": str(run_dir),
            "trainer": {
                "steps": w.steps,
                "model": w.model(),
                # The run's marker lets the benchmark find (and hurt) exactly its own trainers.
                "env": {
                    "BENCH_RUN": run_id,
                    ENV_STEP_S: str(w.step_period_s),
                    "PYTHONPATH": str(REPO),
                    **({ENV_PORT_FROM_JOB: "1"} if under_slurm else {}),
                },
                "command": LOCAL_TRAINER,
                # A large state heals over the process group, into the trainer's own tensors: over HTTP a 1 GB heal
                # takes about the 3-s torchft.timeout_s of this tuning here, and fails when it takes longer.
                "checkpoint_transport": "pg" if w.state_pad_mb else "http",
                # Only used when no live peer exists: lamplighter's and the poll runner's, at the same interval.
                "checkpoint": {"enabled": True, "interval_s": w.fallback_interval_s},
            },
            "groups": {"count": w.replicas, "nodes": 1},
            "lighthouse": {
                "port": lighthouse_port,
                "min_replicas": 1,
                "quorum_tick_ms": 20,
                "join_timeout_ms": 1000,
                "heartbeat_timeout_ms": 500,
            },
            # configs/demo.yaml's tuning for one machine, except pg_timeout_s: 3 s, the timeout every
            # strategy's process group shares (the DDP baseline's hang detection is that timeout).
            "torchft": {"pg_timeout_s": 3, "timeout_s": 3, "quorum_timeout_s": 4, "connect_timeout_s": 10},
            "health": {"hang_timeout_s": HANG_TIMEOUT_S, "poll_interval_s": 0.5},
            "restart": {"budget_per_group": 100, "backoff_initial_s": 0, "crash_loop_max": 100},
            "slurm": {"partition": "debug", "requeue": requeue, "exclusive": True, "slurm_conf": slurm_conf},
        }
    )
