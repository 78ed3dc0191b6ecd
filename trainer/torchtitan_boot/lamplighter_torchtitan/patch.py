"""What lamplighter changes in torchtitan's fault-tolerant trainer, once its module is imported.

`FaultTolerantTrainer.train_step` is wrapped. Before the step (on the training thread, before `zero_grad`
starts torchft's quorum): the state-dict snapshot when torchft#347's fix applies (fixes.py), and the chaos
"exception" of lamplighter's contract (`<run_dir>/inject/<group>.exception`, as the reference trainer
honours it). During it: torchft's commit answers are recorded (the LR schedulers step only on a commit when
that fix applies). After it: lamplighter's heartbeat with torchtitan's own step count, and one step-log line
when the state hash is on (step_log.py), and the job's `<run_dir>/stop-at` (rundir/stop_at.py: the owner's
small regular file holding a step, looked at once a second) lowers `training.steps` to that step, so a
torchtitan job that trains "until told" stops where the reference trainer would. Everything is decided at
the first step, when the trainer's mode is known, and logged once.
"""

from __future__ import annotations

import json
import os
import stat
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import fixes
from .step_log import StepLog, state_hash

INJECTED_MESSAGE = "lamplighter chaos: injected exception"
STOP_AT_MAX_BYTES = 64  # rundir/stop_at.py's: a step number and a newline
STOP_AT_EVERY_S = 1.0


@dataclass
class Settings:
    fixes: bool  # trainer.torchtitan.fixes: apply the fixes for the versions that need them
    state_hash: bool  # trainer.torchtitan.state_hash: log a hash of the state after every step

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Settings:
        return cls(
            fixes=env.get("LAMPLIGHTER_TORCHTITAN_FIXES", "auto") != "off",
            state_hash=env.get("LAMPLIGHTER_TORCHTITAN_STATE_HASH", "0") == "1",
        )


@dataclass
class _Run:
    """Per process: what the first step decided, and what the steps since the last commit were."""

    per_step: bool
    snapshot: fixes.Snapshot | None
    fresh_optimizer: bool
    lr_on_commit: bool
    log: StepLog | None
    inject: Path | None
    beat: Path | None
    healed: list[bool] = field(default_factory=lambda: [False])
    commits: list[bool] = field(default_factory=list)  # torchft's should_commit answers in this train step
    inner_steps: int = 0
    stop_at: Path | None = None
    stop_read: float = 0.0  # time.monotonic() of the last look at stop_at


def _first_step(trainer: Any, settings: Settings) -> _Run:
    ft = trainer.config.fault_tolerance
    per_step = ft.semi_sync_method is None
    decided = fixes.plan(fixes.torchtitan_version(), per_step, settings.fixes)
    for line in decided.notes:
        fixes.say(line)
    snapshot = None
    if fixes.TORCHFT_347 in decided.apply:
        snapshot = fixes.Snapshot()
        fixes.install_snapshot(trainer, snapshot)
    fresh = fixes.TORCHTITAN_4598 in decided.apply
    if fresh and not per_step:
        fixes.fresh_optimizer_on_training_thread(type(trainer.optimizers))
    env = dict(os.environ)
    log = StepLog.from_env(env, trainer.config.training.local_batch_size) if settings.state_hash else None
    if log is not None:
        fixes.say(f"lamplighter: logging a state hash every step to {log.path}")
    run_dir, group = env.get("LAMPLIGHTER_RUN_DIR"), env.get("LAMPLIGHTER_REPLICA_ID")
    inject = beat = stop_at = None
    if run_dir and group is not None:
        inject = Path(run_dir) / "inject" / f"{group}.exception"
        beat = Path(run_dir) / "heartbeat" / f"{group}.{env.get('RANK', '0')}.json"
    if run_dir:
        stop_at = Path(run_dir) / "stop-at"
    run = _Run(
        per_step, snapshot, fresh, fixes.LR_ON_FAILED_COMMIT in decided.apply, log, inject, beat, stop_at=stop_at
    )
    manager = trainer.ft_manager.manager
    _watch_heals(manager, run.healed)
    _watch_commits(manager, run.commits)
    if run.lr_on_commit:
        _lr_on_commit(trainer, run.commits)
    return run


def _watch_commits(manager: Any, answers: list[bool]) -> None:
    """Record torchft's answer each time this replica asks whether to commit."""
    ask = manager.should_commit

    def should_commit(*args: Any, **kwargs: Any) -> bool:
        answer = bool(ask(*args, **kwargs))
        answers.append(answer)
        return answer

    manager.should_commit = should_commit


def _lr_on_commit(trainer: Any, answers: list[bool]) -> None:
    """The LR schedulers step only after a step torchft committed (fixes.LR_ON_FAILED_COMMIT)."""
    schedulers = trainer.lr_schedulers
    step = schedulers.step

    def step_if_committed(*args: Any, **kwargs: Any) -> None:
        if answers and answers[-1]:
            step(*args, **kwargs)

    schedulers.step = step_if_committed


def _write_beat(path: Path, step: int) -> None:
    """lamplighter's heartbeat (trainer/heartbeat.py's format), with torchtitan's own step: the supervisor's
    hang check then sees every step, DiLoCo's inner steps too, and a group at its last step as finishing."""
    attempt = os.environ.get("LAMPLIGHTER_ATTEMPT", "")
    obj = {"step": step, "time": time.time(), "pid": os.getpid()}
    if attempt.isdigit():
        obj["attempt"] = int(attempt)
    # Not contract.write_json_atomic: this runs in the training environment, with no lamplighter to import.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def _watch_heals(manager: Any, healed: list[bool]) -> None:
    """Note when torchft applies a peer's state to this replica (either mode; the flag is read per step)."""
    apply = manager._apply_pending_state_dict

    def applied() -> None:
        apply()
        healed[0] = True

    manager._apply_pending_state_dict = applied


def read_stop_at(path: Path) -> int | None:
    """The step `<run_dir>/stop-at` names, read as rundir/stop_at.py does: only a small regular file of this
    process's user holding a number (no link followed, a FIFO not opened for long); else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size > STOP_AT_MAX_BYTES:
            return None
        text = os.read(fd, STOP_AT_MAX_BYTES + 1).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(text) if text.isdigit() else None


def _honour_stop_at(trainer: Any, run: _Run) -> None:
    """Lower torchtitan's `training.steps` to the job's stop-at step (never below the step it is at: a trainer
    already past it stops now), looking at most once a second."""
    now = time.monotonic()
    if run.stop_at is None or now - run.stop_read < STOP_AT_EVERY_S:
        return
    run.stop_read = now
    target = read_stop_at(run.stop_at)
    training = trainer.config.training
    if target is not None and target < training.steps:
        training.steps = max(target, int(trainer.step))
        fixes.say(f"lamplighter: stopping at step {training.steps} ({run.stop_at})")


def _take_inject(path: Path | None) -> bool:
    if path is None:
        return False
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


def patch(module: types.ModuleType, settings: Settings) -> None:
    """Wrap `module.FaultTolerantTrainer.train_step` (torchtitan.experiments.torchft.trainer)."""
    cls = module.FaultTolerantTrainer
    original = cls.train_step

    def train_step(self: Any, data_iterator: Any) -> Any:
        run: _Run | None = getattr(self, "_lamplighter", None)
        if run is None:
            run = self._lamplighter = _first_step(self, settings)
        if _take_inject(run.inject):
            raise RuntimeError(INJECTED_MESSAGE)
        manager = self.ft_manager.manager
        if run.snapshot is not None:
            run.snapshot.value = fixes.take_state_dict(self, run.fresh_optimizer)
        run.commits.clear()
        out = original(self, data_iterator)
        run.inner_steps += 1
        after = manager.current_step()
        # torchft's answer, not its step: a heal moves the step to the sender's without a commit.
        committed = any(run.commits)
        if run.beat is not None:
            _write_beat(run.beat, int(self.step))
        if run.log is not None and (committed or run.per_step):
            run.log.record(
                step=after,
                committed=committed,
                participants=manager.num_participants(),
                quorum_id=int(getattr(manager, "_quorum_id", -1)),
                healed=run.healed[0],
                state=state_hash(self, with_optimizer=run.per_step) if committed else "",
                trainer_step=int(self.step),
                inner_steps=run.inner_steps,
            )
        if committed or run.per_step:
            run.healed[0] = False
            run.inner_steps = 0
        _honour_stop_at(self, run)
        return out

    cls.train_step = train_step
