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
import os
import stat
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from lamplighter.configs.job_file import load_job_file
from lamplighter.configs.schema import JobConfig
from lamplighter.rundir import contract
from lamplighter.rundir.steplog import StepRecord, append_step
from lamplighter.rundir.stop_at import StopAt
from lamplighter.trainer.adapter import job_run_dir
from lamplighter.trainer.data import Slice, advance, make_batch, step_slice, transition_table
from lamplighter.trainer.fallback_checkpoint import Checkpoint, FallbackWriter, load_checkpoint
from lamplighter.trainer.fence import Claim, Fence, Fenced
from lamplighter.trainer.heartbeat import write_heartbeat
from lamplighter.trainer.identity import Identity, IdentityError, current_identity
from lamplighter.trainer.log import TrainerLog
from lamplighter.trainer.progress import StartAction, decide_start, read_job_progress, write_progress

if TYPE_CHECKING:
    import torch
    from torchft.ddp import DistributedDataParallel
    from torchft.manager import Manager
    from torchft.optim import OptimizerWrapper

    from lamplighter.trainer.ft_setup import FtParts
    from lamplighter.trainer.train_state import TrainState

INJECTED_MESSAGE = "lamplighter chaos: injected exception"
WAIT_BACKOFF_S = 0.05  # between quorums while waiting for a live peer: do not hammer the Lighthouse


class Refused(Exception):
    """Training must not go on in this process, and a restart cannot help."""


def take_inject(path: Path) -> bool:
    """Chaos: whether the inject file existed (it is removed first, so a restart runs clean). Only the job
    owner's own regular file counts: one another user put into a shared run directory is ignored."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return False
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def check_inject(path: Path) -> None:
    if take_inject(path):
        raise RuntimeError(INJECTED_MESSAGE)


def hang_in_collective(run: Run) -> None:
    """Chaos: block the main thread inside the step, for good. torchft's heartbeat thread goes on, so the
    Lighthouse still sees this group alive while its peers wait for its share of the allreduce: only the
    lack of progress gives it away."""
    run.log("chaos: the main thread blocks inside this step (heartbeats go on)")
    threading.Event().wait()


def load_job(path: str) -> JobConfig:
    """job.json (configs/job_file.py: any format version this lamplighter reads, or none)."""
    return load_job_file(path)


def train(job: JobConfig, ident: Identity, log: TrainerLog, clock: Callable[[], float] = time.time) -> int:
    """Train this process's share until the job's target step; returns an exit code of contract.py."""
    t_start = clock()
    paths = contract.RunPaths(Path(ident.run_dir))
    stop = StopAt(paths.root, job.trainer.steps)
    target = stop.target()
    write_heartbeat(
        paths.heartbeat(ident.replica_id, ident.rank), step=0, now=clock(), pid=os.getpid(), attempt=ident.attempt
    )
    job_progress = read_job_progress(paths.progress_dir())
    if job_progress >= target:
        log(f"the job already reached step {job_progress} (target {target}): nothing to do")
        return contract.EXIT_DONE
    log(f"attempt {ident.attempt}: job progress {job_progress}, target {target}, {ident.num_groups} groups")
    fence = Fence(paths.fence(ident.replica_id), Claim(ident.slurm_job_id, ident.attempt))
    if ident.rank == 0:
        fence.claim()  # before the Manager: an older process of this group stops committing from here on
    run = build_run(job, ident, log, clock, paths, t_start, fence, stop)
    fallback = load_checkpoint(run.checkpoint_dir) if job_progress > 0 else None
    gate = StartGate(run, job_progress, fallback, deadline=clock() + job.torchft.quorum_timeout_s)
    log(f"ready after {clock() - t_start:.2f} s (device {run.device}, transport {job.trainer.checkpoint_transport})")
    try:
        return train_to_target(run, gate)
    finally:
        run.close()


@dataclass
class Run:
    """What one trainer process builds once and every step uses."""

    job: JobConfig
    ident: Identity
    log: TrainerLog
    clock: Callable[[], float]
    paths: contract.RunPaths
    t_start: float
    device: torch.device
    state: TrainState
    ft: FtParts  # holds the group's TCPStore (rank 0): it must live as long as the run
    ddp: DistributedDataParallel
    opt: OptimizerWrapper
    table: torch.Tensor  # the data's token transition table (data.py)
    checkpoint_dir: Path
    writer: FallbackWriter | None  # rank 0 only, when the fallback checkpoint is enabled
    fence: Fence  # checked before each commit: a newer attempt of this group fences this one
    stop: StopAt  # trainer.steps, or the owner's stop-at step when smaller (read at most once a second)

    @property
    def manager(self) -> Manager:
        return self.ft.manager

    @property
    def target(self) -> int:
        return self.stop.target()

    def heartbeat(self, step: int) -> None:
        hb = self.paths.heartbeat(self.ident.replica_id, self.ident.rank)
        write_heartbeat(hb, step=step, now=self.clock(), pid=os.getpid(), attempt=self.ident.attempt)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close(timeout=30.0)
        self.manager.shutdown(wait=False)


def build_run(
    job: JobConfig,
    ident: Identity,
    log: TrainerLog,
    clock: Callable[[], float],
    paths: contract.RunPaths,
    t_start: float,
    fence: Fence,
    stop: StopAt,
) -> Run:
    """Model, optimizer, torchft's Manager, DDP and the fallback checkpoint writer."""
    # torch and torchft are imported here, not at the top: the package imports without them (tests/packaging).
    import torch
    from torchft.ddp import DistributedDataParallel
    from torchft.optim import OptimizerWrapper

    from lamplighter.trainer.ft_setup import build_manager, choose_device
    from lamplighter.trainer.model import build_model
    from lamplighter.trainer.train_state import TrainState

    cfg = job.trainer.model
    device = choose_device(job, ident)
    model = build_model(cfg).to(device)
    state = TrainState(model=model, optim=torch.optim.AdamW(model.parameters(), lr=cfg.lr), replica_id=ident.replica_id)
    state.materialize_optimizer_state()  # a heal before the first step then lands in place (train_state.py)
    if cfg.heal_pad_mb:
        state.pad = torch.zeros(cfg.heal_pad_mb * 2**20, dtype=torch.uint8, device=device)
    if ident.rank == 0:
        sending = paths.heal_sending(ident.replica_id)
        state.on_send = lambda: contract.write_json_atomic(
            sending, {"t": clock(), "attempt": ident.attempt, "pid": os.getpid()}
        )
    ft = build_manager(job, ident, state, device, log)
    ck = job.trainer.checkpoint
    ck_dir = Path(ck.dir) if ck.dir else paths.checkpoint_dir()
    return Run(
        job=job,
        ident=ident,
        log=log,
        clock=clock,
        paths=paths,
        t_start=t_start,
        device=device,
        state=state,
        ft=ft,
        ddp=DistributedDataParallel(ft.manager, model),
        opt=OptimizerWrapper(ft.manager, state.optim),
        table=transition_table(cfg.vocab_size, cfg.seed),
        checkpoint_dir=ck_dir,
        writer=FallbackWriter(ck_dir, ck.interval_s, start=clock(), log=log)
        if ck.enabled and ident.rank == 0
        else None,
        fence=fence,
        stop=stop,
    )


def train_to_target(run: Run, gate: StartGate) -> int:
    """Per step: chaos's inject file, a quorum, the start decision (once), then the step itself."""
    told = run.target
    while run.manager.current_step() < (target := run.target):
        if target != told:
            run.log(f"target now step {target}: {run.paths.stop_at()} (trainer.steps {run.job.trainer.steps})")
            told = target
        check_inject(run.paths.inject_exception(run.ident.replica_id))
        take_quorum(run)
        if not gate.decided:
            verdict = gate.decide()
            if verdict is StartVerdict.DONE:
                return contract.EXIT_DONE
            if verdict is StartVerdict.WAIT:
                continue
        train_one_step(run)
    run.log(f"reached the target step {run.target}")
    return contract.EXIT_DONE


# Quorum requests that time out in a row before the trainer gives up and exits (retryable). A timeout changes
# nothing in this process, and its state may be the job's newest: seen in `make bench`, the last live group's
# quorum timed out while its restarted peers were still starting, it exited, and the job lost 19 committed
# steps to its fallback checkpoint; the quorum formed half a second later. The supervisor's hang check bounds
# the wait (no progress for startup_timeout_s / hang_timeout_s).
QUORUM_RETRIES = 10


def lighthouse_moved(run: Run) -> bool:
    """The job's Lighthouse now publishes another address than this process asks (on Slurm, its job was
    requeued to another node): asking again here would only wait."""
    address, _ = contract.lighthouse_address(run.paths.root)
    return address is not None and address != run.ident.lighthouse


def take_quorum(run: Run) -> None:
    """torchft takes the quorum in zero_grad, and heals this group from a peer there if it is behind."""
    run.state.healed_from = None
    t_quorum = run.clock()
    for tries in range(1, QUORUM_RETRIES + 2):
        try:
            run.opt.zero_grad()
            break
        except TimeoutError as e:
            if tries > QUORUM_RETRIES or lighthouse_moved(run):
                raise  # a restart reads the Lighthouse's new address
            run.log(
                f"the quorum timed out ({str(e).split(',')[0]}): asking again ({tries}/{QUORUM_RETRIES}), "
                f"keeping this process's state at step {run.manager.current_step()}"
            )
            # torchft's start_quorum first re-raises the last quorum's error (torchft 2026.10.26: _quorum_future).
            run.manager._quorum_future = None
    if run.state.healed_from is not None:
        run.log(
            f"healed from {run.state.healed_from} to step {run.manager.current_step()} in {run.clock() - t_quorum:.3f} s"
        )


class StartVerdict(Enum):
    DONE = "done"  # the job reached its target meanwhile: nothing to train
    WAIT = "wait"  # not yet: take another quorum
    GO = "go"  # train from the step this group has now


class StartGate:
    """Whether training may go on in this process: decided once, from quorums (progress.py's decide_start)."""

    def __init__(self, run: Run, job_progress: int, fallback: Checkpoint | None, deadline: float) -> None:
        self.run = run
        self.job_progress = job_progress
        self.fallback = fallback
        self.deadline = deadline
        self.decided = False
        self._last_wait_log = ""

    def decide(self) -> StartVerdict:
        run = self.run
        self.job_progress = max(self.job_progress, read_job_progress(run.paths.progress_dir()))
        if self.job_progress >= run.target:
            run.log(f"the job reached its target step {run.target} while this group was starting: nothing to do")
            return StartVerdict.DONE
        d = decide_start(
            now=run.clock(),
            deadline=self.deadline,
            job_progress=self.job_progress,
            manager_step=run.manager.current_step(),
            participants=run.manager.num_participants(),
            num_groups=run.ident.num_groups,
            checkpoint_step=None if self.fallback is None else self.fallback.step,
            heal_error=heal_error(run.manager),
        )
        if d.action is StartAction.WAIT:
            if d.reason != self._last_wait_log:
                run.log(d.reason)
                self._last_wait_log = d.reason
            run.heartbeat(0)  # waiting is alive, not hung
            time.sleep(WAIT_BACKOFF_S)
            return StartVerdict.WAIT
        if d.action is StartAction.REFUSE:
            raise Refused(d.reason)
        if d.action is StartAction.RESTART:
            raise RuntimeError(d.reason)  # a retryable exit: the supervisor restarts this group
        run.log(d.reason)
        if d.action is StartAction.LOAD_CHECKPOINT:
            assert self.fallback is not None
            restore_checkpoint(run.state, run.manager, self.fallback)
            run.log(
                f"fallback checkpoint of step {self.fallback.step} (written by replica {self.fallback.replica_id}) loaded"
            )
        self.decided = True
        return StartVerdict.GO


def heal_error(manager: Manager) -> str | None:
    """Why this quorum's heal failed, if it was asked for and failed (torchft reports it as the step's error)."""
    err = manager.errored()
    return None if err is None else f"{type(err.original_exception).__name__}: {err.original_exception}"


@dataclass(frozen=True)
class StepResult:
    step_before: int
    committed: bool
    participants: int
    position: int  # this group's rank in the quorum
    batch: Slice
    loss: float
    t: float


def train_one_step(run: Run) -> None:
    """This group's slice of the step's data, forward/backward through DDP, commit; then record it."""
    from lamplighter.trainer.ft_setup import release_peers
    from lamplighter.trainer.model import lm_loss

    manager, state, cfg = run.manager, run.state, run.job.trainer.model
    run.log.step = step_before = manager.current_step()
    position = manager.participating_rank()
    participants = manager.num_participants()
    if position is None:
        raise RuntimeError(f"replica {run.ident.replica_id} is not participating in quorum {quorum_id(manager)}")
    sl = step_slice(state.cursor, position, participants, cfg.batch_size)
    tokens = make_batch(
        sl.indices(cfg.dataset_size), seq_len=cfg.seq_len, vocab_size=cfg.vocab_size, seed=cfg.seed, table=run.table
    ).to(run.device)
    loss = lm_loss(run.ddp, tokens)
    if cfg.step_sleep_s:
        time.sleep(cfg.step_sleep_s)  # a real model's compute, paced (trainer.model.step_sleep_s)
    if take_inject(run.paths.inject_hang_collective(run.ident.replica_id)):
        hang_in_collective(run)
    loss.backward()
    run.fence.check()  # a newer attempt of this group runs: leave before voting to commit
    run.opt.step()  # applies the update only if every group in the quorum can commit
    committed = manager.current_step() > step_before
    if not committed and manager.errored() is not None:
        release_peers(run.ft)  # a peer may still wait for this group's share of the failed collective
    if committed:
        state.cursor = advance(state.cursor, participants, cfg.batch_size)
    now = run.clock()
    run.log.step = manager.current_step()
    if run.ident.rank == 0:
        record_step(run, StepResult(step_before, committed, participants, position, sl, float(loss.item()), now))
    run.heartbeat(manager.current_step())


def record_step(run: Run, r: StepResult) -> None:
    """Rank 0: the step log line, the group's progress, and maybe a fallback checkpoint snapshot."""
    manager, state, ident = run.manager, run.state, run.ident
    digest = state.hash()
    rec = StepRecord(
        t=r.t,
        replica_id=ident.replica_id,
        step=manager.current_step(),
        committed=r.committed,
        participants=r.participants,
        quorum_id=quorum_id(manager),
        healed_from=state.healed_from,
        loss=r.loss,
        state_hash=digest,
        attempt=ident.attempt,
        samples=r.batch.count,
        first_sample=r.batch.first,
    )
    append_step(run.paths.steps(ident.replica_id), rec)
    if not r.committed:
        run.log("step not committed (a peer failed or the quorum was too small); it will be retried")
        return
    write_progress(run.paths.progress(ident.replica_id), manager.current_step())
    if state.healed_from is not None or r.step_before == 0 or manager.current_step() == run.target:
        run.log(f"committed; loss {rec.loss:.4f}, {run.clock() - run.t_start:.2f} s since process start")
    if run.writer is not None and r.position == 0 and run.writer.due(r.t):
        run.writer.submit(
            r.t,
            step=manager.current_step(),
            batches_committed=manager.batches_committed(),
            user=state.user_state(),
            state_hash=digest,
            replica_id=ident.replica_id,
        )


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
    except Fenced as e:
        log(f"fenced: {e}")
        # Not "no restart": Slurm ends the job's current attempt when a stale attempt's batch script exits
        # (same job id), whatever its status, and takes that status as the job's. 78 there made the node
        # daemon give the group up (soak); 75 has it requeued, which is what the current attempt needs.
        return contract.EXIT_RETRYABLE
    except Exception:
        log("failed, a restart may help:\n" + traceback.format_exc())
        return contract.EXIT_RETRYABLE
