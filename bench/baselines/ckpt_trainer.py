"""The checkpoint-restart baseline's trainer: plain gloo DDP, no torchft, a checkpoint every K steps.

    python -m bench.baselines.ckpt_trainer --config RUN_DIR/job.json --mtbf-s 30 [--no-checkpoint]

One process per replica (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT from the
launcher). The work per step is the reference trainer's: the same model,
data slices, AdamW, per-step state hash, step log and heartbeat
(lamplighter.trainer), so only the fault-tolerance mechanism differs.

The checkpoint interval follows the Young/Daly rule, tau = sqrt(2 * C * MTBF),
with C the measured cost of the job's first checkpoint (taken after a few
steps, which also give the step time): what a careful user who knows the
cluster's MTBF would choose. It is kept as K = tau / step time steps, the
same on every rank, and measured once per job: a restart reads it from the
log. Rank 0 writes each checkpoint (torch.save to a temporary file, fsync,
rename) while the other ranks wait at a barrier with a longer timeout than
the collectives' (a checkpoint of a large state outlasts it); every rank
resumes from it.
With `trainer.model.heal_pad_mb` (the benchmark's big-state arm) every
checkpoint carries that much more state, written and read back in full, as
the optimizer state of a large model would be.
The log's `quorum_id` is the restart count, so a step committed again after a
restart shows up as lost work in lamplighter.report.build.lost_steps.
Like the reference trainer, it honours the benchmark's hang-collective
(<run_dir>/inject/<rank>.hang-collective): the main thread blocks inside the
step, and the peers' allreduce waits for it until the process group's timeout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.gpu_time_trainer import ENV_STEP_S, pace_steps
from lamplighter.configs.job_file import load_job_file
from lamplighter.configs.schema import JobConfig
from lamplighter.rundir import contract
from lamplighter.rundir.steplog import StepRecord, append_step
from lamplighter.trainer.data import advance, make_batch, step_slice, transition_table
from lamplighter.trainer.heartbeat import write_heartbeat

CKPT_FILE = "ckpt.pt"
CKPT_LOG = "ckpt_log.jsonl"


def young_daly_interval_s(cost_s: float, mtbf_s: float) -> float:
    """The checkpoint interval that minimises expected lost + checkpoint time (first-order)."""
    return math.sqrt(2.0 * cost_s * mtbf_s)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


MEASURE_AFTER = 5  # steps before the measuring checkpoint: the first ones include warm-up
CKPT_BARRIER_S = 30.0  # how long the ranks wait for rank 0's checkpoint


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """The job's checkpoint log (log_event's records), oldest first; empty before the first one."""
    try:
        lines = (run_dir / CKPT_LOG).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def chosen_interval(run_dir: Path) -> int | None:
    """K in steps, as an earlier run of this job measured it (None: measure it now)."""
    ks = [e.get("k_steps") for e in read_events(run_dir) if e["event"] == "interval"]
    return int(ks[-1]) if ks and ks[-1] else None


def take_inject(path: Path) -> bool:
    """Chaos (the benchmark's hang-collective): whether the file existed; removed first, so a restart runs clean."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def log_event(run_dir: Path, **fields: Any) -> None:
    with open(run_dir / CKPT_LOG, "a") as f:
        f.write(json.dumps(fields) + "\n")


def train(job: JobConfig, run_dir: Path, mtbf_s: float | None) -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("SLURM_RESTART_COUNT") or os.environ.get(contract.ENV_ATTEMPT) or 0)
    paths = contract.RunPaths(run_dir)
    heartbeat = paths.heartbeat(rank, 0)
    write_heartbeat(heartbeat, step=0, now=time.time(), pid=os.getpid())

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from lamplighter.trainer.model import build_model, lm_loss
    from lamplighter.trainer.train_state import TrainState

    cfg = job.trainer.model
    target = job.trainer.steps
    model = build_model(cfg)
    state = TrainState(model=model, optim=torch.optim.AdamW(model.parameters(), lr=cfg.lr), replica_id=rank)
    # The big-state arm's extra state: what lamplighter's groups send with a heal, this trainer checkpoints.
    pad = torch.zeros(cfg.heal_pad_mb * 2**20, dtype=torch.uint8) if cfg.heal_pad_mb else None
    ckpt = run_dir / CKPT_FILE
    step = 0
    if ckpt.exists():
        t_load = time.monotonic()
        saved = torch.load(ckpt, weights_only=False)
        state.load_user_state(saved["user"])
        if pad is not None:
            pad.copy_(saved["pad"])
        step = int(saved["step"])
        log_event(run_dir, event="load", t=time.time(), rank=rank, step=step, cost_s=time.monotonic() - t_load)
    # Rendezvous waits long (ranks start seconds apart); collectives use the same timeout torchft's process group has.
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        is_master=rank == 0,
        timeout=timedelta(seconds=job.torchft.connect_timeout_s + 50),
    )
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=job.torchft.pg_timeout_s)
    )
    ddp = DistributedDataParallel(model)
    ckpt_group = dist.new_group(
        backend="gloo", timeout=timedelta(seconds=max(CKPT_BARRIER_S, job.torchft.pg_timeout_s))
    )
    table = transition_table(cfg.vocab_size, cfg.seed)
    # K: checkpoint every K steps; 0: measure the cost at MEASURE_AFTER steps from here, then choose K.
    every: int | None = None if mtbf_s is None else (chosen_interval(run_dir) or 0)
    first_step, step_times = step, []
    print(f"rank {rank}/{world} attempt {attempt}: resuming at step {step}, target {target}", flush=True)
    while step < target:
        sl = step_slice(state.cursor, rank, world, cfg.batch_size)
        tokens = make_batch(
            sl.indices(cfg.dataset_size), seq_len=cfg.seq_len, vocab_size=cfg.vocab_size, seed=cfg.seed, table=table
        )
        state.optim.zero_grad()
        loss = lm_loss(ddp, tokens)
        if take_inject(paths.inject_hang_collective(rank)):
            print(f"rank {rank}: chaos: the main thread blocks inside this step", flush=True)
            threading.Event().wait()  # the peers' allreduce waits for this rank's share until its timeout
        loss.backward()  # DDP's allreduce: a dead or hung peer raises here after the timeout
        state.optim.step()
        state.cursor = advance(state.cursor, world, cfg.batch_size)
        step += 1
        now = time.time()
        append_step(
            paths.steps(rank),
            StepRecord(
                t=now,
                replica_id=rank,
                step=step,
                committed=True,
                participants=world,
                quorum_id=attempt,
                healed_from=None,
                loss=float(loss.item()),
                state_hash=state.hash(),
                attempt=attempt,
                samples=sl.count,
                first_sample=sl.first,
            ),
        )
        step_times.append(time.monotonic())
        due = every is not None and (step - first_step == MEASURE_AFTER if every == 0 else step % every == 0)
        if due and step < target:
            assert mtbf_s is not None and every is not None
            cost = 0.0
            if rank == 0:
                t0 = time.monotonic()
                saved_state: dict[str, Any] = {"step": step, "user": state.user_state()}
                if pad is not None:
                    saved_state["pad"] = pad
                save_checkpoint(ckpt, saved_state)
                cost = time.monotonic() - t0
                log_event(run_dir, event="checkpoint", t=time.time(), step=step, cost_s=cost)
            if every == 0:
                # Rank 0 chooses K and tells the others, so that every rank checkpoints at the same steps.
                k = torch.zeros(1, dtype=torch.int64)
                if rank == 0:
                    tau = young_daly_interval_s(cost, mtbf_s)
                    step_s = (step_times[-1] - step_times[1]) / (len(step_times) - 2)
                    k[0] = max(1, round(tau / step_s))
                    log_event(
                        run_dir,
                        event="interval",
                        t=time.time(),
                        cost_s=cost,
                        mtbf_s=mtbf_s,
                        tau_s=tau,
                        step_s=step_s,
                        k_steps=int(k[0]),
                    )
                dist.broadcast(k, 0, group=ckpt_group)
                every = int(k[0])
            else:
                dist.barrier(group=ckpt_group)
        write_heartbeat(heartbeat, step=step, now=time.time(), pid=os.getpid())
    dist.destroy_process_group()
    return contract.EXIT_DONE


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.baselines.ckpt_trainer", description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="resolved job config (JSON); its run_dir holds logs and checkpoint")
    ap.add_argument("--mtbf-s", type=float, default=None, help="the MTBF the Young/Daly interval is chosen for")
    ap.add_argument("--no-checkpoint", action="store_true", help="never checkpoint (the overhead bench)")
    args = ap.parse_args()
    pace_steps(float(os.environ.get(ENV_STEP_S, "0") or 0))
    job = load_job_file(args.config)
    assert job.run_dir is not None
    return train(job, Path(job.run_dir), None if args.no_checkpoint else (args.mtbf_s or 60.0))


if __name__ == "__main__":
    raise SystemExit(main())
