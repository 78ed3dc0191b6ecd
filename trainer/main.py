"""The reference trainer's loop: `python -m lamplighter.trainer --config PATH`.

Per step: check the chaos inject file, take a quorum (torchft heals this
group here if it is behind), decide once per process whether training may
go on (progress.py), take this group's data slice, forward/backward with
fault-tolerant DDP, commit through the optimizer wrapper, then record the
step (step log, progress, heartbeat) and maybe snapshot the fallback
checkpoint. Exit codes are those of contract.py.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from lamplighter.configs.schema import JobConfig
from lamplighter.trainer import contract
from lamplighter.trainer.adapter import job_run_dir
from lamplighter.trainer.data import advance, make_batch, step_slice, transition_table
from lamplighter.trainer.fallback_checkpoint import Checkpoint, FallbackWriter, load_checkpoint
from lamplighter.trainer.heartbeat import write_heartbeat
from lamplighter.trainer.identity import Identity, IdentityError, current_identity
from lamplighter.trainer.log import TrainerLog
from lamplighter.trainer.progress import StartAction, decide_start, read_job_progress, write_progress
from lamplighter.trainer.steplog import StepRecord, append_step

if TYPE_CHECKING:
    from torchft.manager import Manager

    from lamplighter.trainer.train_state import TrainState

INJECTED_MESSAGE = "lamplighter chaos: injected exception"
WAIT_BACKOFF_S = 0.05  # between quorums while waiting for a live peer: do not hammer the Lighthouse


class Refused(Exception):
    """Training must not go on in this process, and a restart cannot help."""


def check_inject(path: Path) -> None:
    """Chaos: raise once if the inject file exists (it is removed first, so a restart runs clean)."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    raise RuntimeError(INJECTED_MESSAGE)


def load_job(path: str) -> JobConfig:
    with open(path) as f:
        return JobConfig.model_validate(json.load(f))


def train(job: JobConfig, ident: Identity, log: TrainerLog, clock: Callable[[], float] = time.time) -> int:
    t_start = clock()
    paths = contract.RunPaths(Path(ident.run_dir))
    cfg = job.trainer.model
    target = job.trainer.steps
    heartbeat = paths.heartbeat(ident.replica_id, ident.rank)
    write_heartbeat(heartbeat, step=0, now=clock(), pid=os.getpid(), attempt=ident.attempt)

    job_progress = read_job_progress(paths.progress_dir())
    if job_progress >= target:
        log(f"the job already reached step {job_progress} (target {target}): nothing to do")
        return contract.EXIT_DONE
    log(f"attempt {ident.attempt}: job progress {job_progress}, target {target}, {ident.num_groups} groups")

    import torch

    from lamplighter.trainer.ft_setup import build_manager, choose_device
    from lamplighter.trainer.model import build_model, lm_loss
    from lamplighter.trainer.train_state import TrainState

    device = choose_device(job, ident)
    model = build_model(cfg).to(device)
    state = TrainState(model=model, optim=torch.optim.AdamW(model.parameters(), lr=cfg.lr), replica_id=ident.replica_id)
    parts = build_manager(job, ident, state, device)
    manager = parts.manager
    from torchft.ddp import DistributedDataParallel
    from torchft.optim import OptimizerWrapper

    ddp = DistributedDataParallel(manager, model)
    opt = OptimizerWrapper(manager, state.optim)
    table = transition_table(cfg.vocab_size, cfg.seed)
    ck_dir = Path(job.trainer.checkpoint.dir) if job.trainer.checkpoint.dir else paths.checkpoint_dir()
    writer = (
        FallbackWriter(ck_dir, job.trainer.checkpoint.interval_s, start=clock(), log=log)
        if job.trainer.checkpoint.enabled and ident.rank == 0
        else None
    )
    fallback: Checkpoint | None = load_checkpoint(ck_dir) if job_progress > 0 else None
    wait_deadline = clock() + job.torchft.quorum_timeout_s
    decided = False
    last_wait_log = ""
    log(f"ready after {clock() - t_start:.2f} s (device {device}, transport {job.trainer.checkpoint_transport})")
    try:
        while manager.current_step() < target:
            check_inject(paths.inject_exception(ident.replica_id))
            state.healed_from = None
            t_quorum = clock()
            opt.zero_grad()  # quorum, and a heal from a peer if this group is behind
            if state.healed_from is not None:
                log(f"healed from {state.healed_from} to step {manager.current_step()} in {clock() - t_quorum:.3f} s")
            if not decided:
                job_progress = max(job_progress, read_job_progress(paths.progress_dir()))
                if job_progress >= target:
                    log(f"the job reached its target step {target} while this group was starting: nothing to do")
                    return contract.EXIT_DONE
                d = decide_start(
                    now=clock(),
                    deadline=wait_deadline,
                    job_progress=job_progress,
                    manager_step=manager.current_step(),
                    participants=manager.num_participants(),
                    num_groups=ident.num_groups,
                    checkpoint_step=None if fallback is None else fallback.step,
                )
                if d.action is StartAction.WAIT:
                    if d.reason != last_wait_log:
                        log(d.reason)
                        last_wait_log = d.reason
                    write_heartbeat(heartbeat, step=0, now=clock(), pid=os.getpid(), attempt=ident.attempt)
                    time.sleep(WAIT_BACKOFF_S)
                    continue
                if d.action is StartAction.REFUSE:
                    raise Refused(d.reason)
                log(d.reason)
                if d.action is StartAction.LOAD_CHECKPOINT:
                    assert fallback is not None
                    restore_checkpoint(state, manager, fallback)
                    log(
                        f"fallback checkpoint of step {fallback.step} (written by replica {fallback.replica_id}) loaded"
                    )
                decided = True
            log.step = step_before = manager.current_step()
            position = manager.participating_rank()
            participants = manager.num_participants()
            if position is None:
                raise RuntimeError(f"replica {ident.replica_id} is not participating in quorum {quorum_id(manager)}")
            sl = step_slice(state.cursor, position, participants, cfg.batch_size)
            tokens = make_batch(
                sl.indices(cfg.dataset_size), seq_len=cfg.seq_len, vocab_size=cfg.vocab_size, seed=cfg.seed, table=table
            ).to(device)
            loss = lm_loss(ddp, tokens)
            loss.backward()
            opt.step()  # applies the update only if every group in the quorum can commit
            committed = manager.current_step() > step_before
            if committed:
                state.cursor = advance(state.cursor, participants, cfg.batch_size)
            now = clock()
            log.step = manager.current_step()
            if ident.rank == 0:
                digest = state.hash()
                rec = StepRecord(
                    t=now,
                    replica_id=ident.replica_id,
                    step=manager.current_step(),
                    committed=committed,
                    participants=participants,
                    quorum_id=quorum_id(manager),
                    healed_from=state.healed_from,
                    loss=float(loss.item()),
                    state_hash=digest,
                    attempt=ident.attempt,
                    samples=sl.count,
                    first_sample=sl.first,
                )
                append_step(paths.steps(ident.replica_id), rec)
                if committed:
                    write_progress(paths.progress(ident.replica_id), manager.current_step())
                    if state.healed_from is not None or step_before == 0 or manager.current_step() == target:
                        log(f"committed; loss {rec.loss:.4f}, {clock() - t_start:.2f} s since process start")
                    if writer is not None and position == 0 and writer.due(now):
                        writer.submit(
                            now,
                            step=manager.current_step(),
                            batches_committed=manager.batches_committed(),
                            user=state.user_state(),
                            state_hash=digest,
                            replica_id=ident.replica_id,
                        )
                else:
                    log("step not committed (a peer failed or the quorum was too small); it will be retried")
            write_heartbeat(heartbeat, step=manager.current_step(), now=clock(), pid=os.getpid(), attempt=ident.attempt)
        log(f"reached the target step {target}")
        return contract.EXIT_DONE
    finally:
        if writer is not None:
            writer.close(timeout=30.0)
        manager.shutdown(wait=False)


def quorum_id(manager: Manager) -> int:
    # torchft has no public accessor for the quorum id in this version.
    return int(getattr(manager, "_quorum_id", -1))


def restore_checkpoint(state: TrainState, manager: Manager, ck: Checkpoint) -> None:
    """Load the fallback checkpoint into the training state and the Manager's step, and check it."""
    state.load_user_state(ck.user)
    manager.load_state_dict({"step": ck.step, "batches_committed": ck.batches_committed})
    got = state.hash()
    if got != ck.state_hash:
        raise Refused(
            f"fallback checkpoint of step {ck.step} does not match its recorded hash ({got} != {ck.state_hash})"
        )
    state.healed_from = f"checkpoint:{ck.step}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lamplighter.trainer", description="lamplighter's reference torchft trainer"
    )
    ap.add_argument("--config", default=os.environ.get(contract.ENV_CONFIG), help="resolved job config (JSON)")
    args = ap.parse_args(argv)
    boot = TrainerLog(int(os.environ.get(contract.ENV_REPLICA_ID, "-1") or -1), int(os.environ.get("RANK", "0") or 0))
    if not args.config:
        boot(f"no --config and no {contract.ENV_CONFIG}: nothing to train")
        return contract.EXIT_NO_RESTART
    try:
        job = load_job(args.config)
        ident = current_identity(default_run_dir=job_run_dir(job), default_job=job.name)
    except (OSError, ValueError, ValidationError, IdentityError) as e:
        boot(f"bad configuration ({args.config}): {e}")
        return contract.EXIT_NO_RESTART
    log = TrainerLog(ident.replica_id, ident.rank)
    try:
        return train(job, ident, log)
    except Refused as e:
        log(f"refusing to train: {e}")
        return contract.EXIT_NO_RESTART
    except Exception:
        log("failed, a restart may help:\n" + traceback.format_exc())
        return contract.EXIT_RETRYABLE
