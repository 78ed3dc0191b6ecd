"""The in-job agent: a group's trainer, its warm spare and its restarts, inside the group's own Slurm job.

    python -m lamplighter.slurm.injob.agent --run-dir DIR --group N --config JOB.json [--lighthouse URL] [--spare]
        [--slurm-conf FILE] -- srun --kill-on-bad-exit=1 ... bash -c TASK_WRAPPER lamplighter-task TRAINER ARGV...

The group's batch script runs it as the job's user, in the job's batch step; nothing it starts leaves
the allocation. It
- ends with 0, starting nothing, when the job is already complete (`<run_dir>/completed`: a group requeued
  just before the others reached the target has nothing left to do), looked at before every trainer start;
- in a job `lamplighter submit` started (its submission record is there), waits (up to LIGHTHOUSE_WAIT_S) for
  the job's Lighthouse to publish its address: Slurm starts groups once the Lighthouse job has started
  (`--dependency=after:`), which may be before the Lighthouse inside it has bound its port;
- starts the trainer step (the srun command after `--`), with TORCHFT_LIGHTHOUSE read where the job's
  Lighthouse published it (`lighthouse.json`, the job owner's file; else --lighthouse, the config's
  fixed address) and LAMPLIGHTER_ATTEMPT = Slurm's restarts * 100 + its in-job restarts
  (rundir/contract.py), so that a restarted trainer fences the one before;
- with --spare, once the trainer has committed (its heartbeat names this attempt and a step), starts the
  spare step (slurm/injob/steps.py) that will be its successor;
- when the trainer step ends, asks slurm/injob/decide.py: done (0: writes `completed` unless this run is a
  stale attempt Slurm moved on from), an in-job restart (the spare, else cold), or the end of the job
  with the trainer's status, for the node daemon to requeue;
- on SIGTERM, SIGINT or SIGHUP (scancel, a requeue, the time limit) restarts nothing.
Each thing it does is a line in `<run_dir>/injob/g<N>.jsonl` (events.py) and on its stderr (the job's log).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from lamplighter.configs.job_file import parse_job_file
from lamplighter.configs.loader import ConfigError
from lamplighter.configs.schema import JobConfig, RestartConfig
from lamplighter.lighthouse.steplog import groups_recorded
from lamplighter.rundir import contract
from lamplighter.rundir.actions import ACTIONS_FILE, append_line, format_action
from lamplighter.rundir.owned_file import MIB, OwnedFileError, read_owned, read_owned_tail
from lamplighter.slurm.injob.decide import AgentDecision, AgentState, StepEnded, decide, spare_due
from lamplighter.slurm.injob.events import append_event, journal_path
from lamplighter.slurm.injob.steps import StepCommand, activate, activation_line, retire, start_step
from lamplighter.slurm.parsers import parse_scontrol_job
from lamplighter.slurm.run import SlurmError, run_slurm

POLL_S = 0.05  # how often the agent looks at its steps: a restart waits at most this long to begin
SPARE_DEATHS_MAX = 3  # spares that die unused in a row: restarts start cold from then on
PREFIX = "lamplighter injob:"
# How long a group started by `lamplighter submit` waits for its Lighthouse's address before it starts anyway
# (on the config's fixed address) or ends: the Lighthouse starts in about a second once its job runs.
LIGHTHOUSE_WAIT_S = 300.0
# The Lighthouse's step log read for "did this group ever train" (about 150 bytes a line): its last ~100k lines.
LIGHTHOUSE_TAIL_BYTES = 16 * MIB


def say(msg: str) -> None:
    print(f"{PREFIX} {msg}", file=sys.stderr, flush=True)


@dataclass
class Stop:
    requested: bool = False
    signum: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested, self.signum = True, signum


@dataclass
class Agent:
    run_dir: Path
    group: int
    command: StepCommand
    restart: RestartConfig
    preload: list[str]
    spare_wanted: bool
    fixed_lighthouse: str | None
    restarts: int  # Slurm's restart count of this job (SLURM_RESTART_COUNT)
    env: Mapping[str, str]
    stop: Stop = field(default_factory=Stop)
    uid: int = field(default_factory=os.getuid)

    def __post_init__(self) -> None:
        self.paths = contract.RunPaths(self.run_dir)
        self.journal = journal_path(self.run_dir, self.group)
        self.state = AgentState()
        self.spare: subprocess.Popen[bytes] | None = None
        self.spare_attempt: int | None = None
        self.spare_deaths = 0
        self.no_spare = self.command.why_no_spare() if self.spare_wanted else "slurm.spare is off"
        if self.spare_wanted and self.no_spare:
            say(self.no_spare)

    # -- what the run directory says ---------------------------------------------------

    def completed(self) -> bool:
        """The job's `completed` marker, as its owner wrote it (another user's file there is ignored)."""
        try:
            read_owned(self.paths.completed(), owner=self.uid, max_bytes=64 * 1024)
        except OwnedFileError as e:
            if e.why != "no such file":
                say(f"ignoring {e}")
            return False
        return True

    def lighthouse(self) -> str | None:
        address, why = contract.lighthouse_address(self.run_dir, self.uid)
        if why:
            say(f"ignoring the published Lighthouse address: {why}")
        return address or self.fixed_lighthouse

    def wait_for_lighthouse(self, timeout_s: float = LIGHTHOUSE_WAIT_S) -> None:
        """Wait (bounded) for this job's Lighthouse to publish its address, when `lamplighter submit` started
        the job: its groups may start as soon as the Lighthouse job has (--dependency=after:), before the
        Lighthouse inside it has bound its port. A script run by hand (no submission record) waits not."""
        if self.published() or not self.paths.root.joinpath("submission.json").is_file():
            return
        say(
            f"waiting up to {timeout_s:.0f} s for this job's Lighthouse to publish its address in {self.paths.lighthouse()}"
        )
        end = time.monotonic() + timeout_s
        while not self.stop.requested and time.monotonic() < end:
            if self.published():
                return
            time.sleep(POLL_S)

    def published(self) -> bool:
        return contract.lighthouse_address(self.run_dir, self.uid)[0] is not None

    def committed(self, attempt: int) -> bool:
        """Has this attempt committed a step? Its heartbeats say so (any rank's)."""
        folder = self.paths.heartbeat(self.group, 0).parent
        try:
            names = [p for p in os.listdir(folder) if p.startswith(f"{self.group}.") and p.endswith(".json")]
        except OSError:
            return False
        for name in names:
            try:
                beat = json.loads(read_owned(folder / name, owner=self.uid, max_bytes=contract.SMALL_FILE_BYTES))
                if int(beat.get("attempt", -1)) == attempt and int(beat.get("step", 0)) > 0:
                    return True
            except (OwnedFileError, ValueError, TypeError, AttributeError):
                continue
        return False

    # -- steps -----------------------------------------------------------------------------

    def attempt(self) -> int:
        return contract.attempt_number(self.restarts, self.state.in_job)

    def step_env(self, attempt: int, lighthouse: str) -> dict[str, str]:
        return {**self.env, contract.ENV_ATTEMPT: str(attempt), "TORCHFT_LIGHTHOUSE": lighthouse}

    def event(self, event: str, **fields: object) -> None:
        try:
            append_event(self.journal, event, time.time(), group=self.group, **fields)
        except OSError as e:
            say(f"cannot write {self.journal}: {e}")

    def start_trainer(self, how: str) -> subprocess.Popen[bytes] | None:
        attempt = self.attempt()
        lighthouse = self.lighthouse()
        if lighthouse is None:
            say(f"no Lighthouse address in {self.paths.lighthouse()}: submit the job with `lamplighter submit`")
            return None
        if how == "warm" and self.spare is not None:
            line = activation_line(
                self.command.trainer,
                {contract.ENV_ATTEMPT: str(attempt), "TORCHFT_LIGHTHOUSE": lighthouse},
                os.getcwd(),
            )
            spare, self.spare, self.spare_attempt = self.spare, None, None
            if activate(spare, line):
                self.event("started", how="warm", attempt=attempt)
                say(f"attempt {attempt}: the trainer runs in the warm spare")
                return spare
            say("the spare died before it could take over: starting cold")
            self._spare_died(spare)
        trainer = start_step(self.command.argv, self.step_env(attempt, lighthouse))
        self.event("started", how="cold", attempt=attempt)
        say(f"attempt {attempt}: the trainer step starts (cold)")
        return trainer

    def start_spare(self) -> None:
        planned = self.attempt() + 1  # the spare is the next attempt's trainer (its environment says so)
        lighthouse = self.lighthouse() or ""
        self.spare = start_step(
            self.command.spare_argv(self.preload), self.step_env(planned, lighthouse), stdin_pipe=True
        )
        self.spare_attempt = planned
        self.event("spare", attempt=planned)
        say(f"a warm spare step starts for attempt {planned}")

    def _spare_died(self, spare: subprocess.Popen[bytes]) -> None:
        self.spare_deaths += 1
        self.event("spare", died=spare.poll())
        if self.spare_deaths >= SPARE_DEATHS_MAX:
            self.no_spare = f"{self.spare_deaths} spares in a row died unused: restarts start cold"
            say(self.no_spare)

    def watch(self, trainer: subprocess.Popen[bytes], attempt: int, started: float) -> int:
        """Until the trainer step ends: start the spare once it has committed; keep it alive."""
        while True:
            code = trainer.poll()
            if code is not None:
                return code
            if self.spare is not None and self.spare.poll() is not None:
                self._spare_died(self.spare)
                self.spare, self.spare_attempt = None, None
            wants = self.spare is None and self.no_spare is None and not self.stop.requested
            if wants and spare_due(time.time(), started, self.committed(attempt)):
                self.start_spare()
            time.sleep(POLL_S)

    # -- the run ---------------------------------------------------------------------------

    def ever_committed(self) -> bool:
        """Has this group committed a step in this job, in any attempt? Its heartbeats say so (any rank's),
        or, for a trainer that writes none (any torchft trainer), the steps its Lighthouse recorded."""
        return self._beat_committed() or self._lighthouse_recorded()

    def _lighthouse_recorded(self) -> bool:
        path = self.paths.lighthouse_steps()
        try:
            data, whole = read_owned_tail(path, owner=self.uid, max_bytes=LIGHTHOUSE_TAIL_BYTES)
        except OwnedFileError:
            return False
        # A group that reached its target committed lately, so the tail holds it; one seen only in an
        # older part of a longer file cannot be told from one never seen: not said to have never trained.
        return self.group in groups_recorded(data.decode(errors="replace")) or not whole

    def _beat_committed(self) -> bool:
        folder = self.paths.heartbeat(self.group, 0).parent
        try:
            names = [p for p in os.listdir(folder) if p.startswith(f"{self.group}.") and p.endswith(".json")]
        except OSError:
            return False
        for name in names:
            try:
                beat = json.loads(read_owned(folder / name, owner=self.uid, max_bytes=contract.SMALL_FILE_BYTES))
                if int(beat.get("step", 0)) > 0:
                    return True
            except (OwnedFileError, ValueError, TypeError, AttributeError):
                continue
        return False

    def done_without_training(self) -> None:
        """The job completed and this group never committed a step: others trained without it, which no
        Slurm state shows (every job ends COMPLETED). Said in its log and, for `lamplighter why`, the run dir's."""
        reason = (
            f"group {self.group} never committed a step: the job reached its target without it (no fault "
            "tolerance from this group; did it ever reach the Lighthouse? see its log)"
        )
        say(f"WARNING: {reason}")
        job_id = self.env.get("SLURM_JOB_ID") or "?"
        name = self.env.get(contract.ENV_JOB) or self.run_dir.name
        line = format_action(
            time.time(),
            self.env.get("SLURMD_NODENAME") or os.uname().nodename,
            "group_never_trained",
            job_id,
            reason,
            {"group": self.group},
            outcome="warning",
            group=f"{name}/g{self.group}",
            source="in-job agent",
        )
        try:
            append_line(self.paths.root / ACTIONS_FILE, line)
        except OSError as e:
            say(f"cannot write {self.paths.root / ACTIONS_FILE}: {e}")

    def run(self) -> int:
        if self.completed():
            say("the job already reached its target (a group completed): nothing to do")
            if not self.ever_committed():
                self.done_without_training()
            return 0
        self.wait_for_lighthouse()
        how = "cold"
        while True:
            # Again before every start: the job may have completed while this waited for its Lighthouse or
            # backed off before an in-job restart, and a trainer started then finds no peer to heal from and
            # trains from step 0 on its own.
            if self.completed():
                say("the job reached its target (a group completed) before this trainer started: nothing to do")
                self.retire_spare()
                if not self.ever_committed():
                    self.done_without_training()
                return 0
            attempt = self.attempt()
            started = time.time()
            trainer = self.start_trainer(how)
            if trainer is None:
                self.retire_spare()
                return 1
            code = self.watch(trainer, attempt, started)
            status = code if code >= 0 else 128 - code
            seen = StepEnded(
                status,
                stopping=self.stop.requested,
                completed=status != 0 and self.completed(),
                spare_ready=self.spare is not None and self.spare.poll() is None,
            )
            self.state, d = decide(time.time(), self.state, seen, self.restart)
            self.event("ended", attempt=attempt, status=status, action=d.action, reason=d.reason)
            say(f"attempt {attempt}: {d.reason}")
            if d.action in ("restart_warm", "restart_cold"):
                how = "warm" if d.action == "restart_warm" else "cold"
                self.sleep(d.delay_s)
                if self.stop.requested:
                    self.retire_spare()
                    return status
                continue
            self.retire_spare()
            return self.finish(d)

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stop.requested and time.monotonic() < end:
            time.sleep(min(POLL_S, max(0.0, end - time.monotonic())))

    def retire_spare(self) -> None:
        if self.spare is not None:
            retire(self.spare)
            self.spare = None

    def finish(self, d: AgentDecision) -> int:
        if d.action == "done" and self.completed() and not self.ever_committed():
            self.done_without_training()
        if d.action == "done" and d.exit_status == 0 and not self.completed():
            current = slurm_restarts(self.env.get("SLURM_JOB_ID"))
            # Slurm not answering: nothing says this run is stale, and a real completion must count.
            if current is not None and current != self.restarts:
                say(f"the trainer ended with 0, but this is a stale attempt (Slurm is at restart {current}): not done")
                return 0
            mark_completed(self.paths.completed(), self.group)
        return d.exit_status


def mark_completed(path: Path, group: int) -> None:
    """Append `group N` to the job's `completed` marker (no link followed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"group {group}\n".encode())
    finally:
        os.close(fd)


def slurm_restarts(job_id: str | None, timeout: float = 10.0) -> int | None:
    """Slurm's restart count of this job now (`scontrol show job`, through the one Slurm call function and its
    parser), or None when Slurm does not answer."""
    if not job_id or not job_id.isdigit():
        return None
    try:
        return parse_scontrol_job(run_slurm(["scontrol", "-o", "show", "job", job_id], timeout=timeout)).restarts
    except (SlurmError, ValueError):
        return None


def load_config(path: str) -> JobConfig:
    """The job's own resolved config (job.json), as its user wrote it."""
    raw = read_owned(path, owner=os.getuid(), max_bytes=MIB)
    return parse_job_file(raw.decode("utf-8", errors="replace"), path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lamplighter.slurm.injob.agent",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--group", type=int, required=True)
    ap.add_argument("--config", required=True, help="the job's job.json (its restart policy and preload)")
    ap.add_argument("--lighthouse", default=None, help="the config's fixed Lighthouse address, if it has one")
    ap.add_argument("--spare", action="store_true", help="keep a warm spare step (slurm.spare)")
    ap.add_argument("--slurm-conf", default=None, help="SLURM_CONF for scontrol (slurm.slurm_conf)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the trainer step's srun command")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        step = StepCommand.split(command)
    except ValueError as e:
        ap.error(str(e))
    try:
        job = load_config(args.config)
        restart, preload = job.restart, list(job.restart.standby_preload)
    except (OwnedFileError, ConfigError) as e:
        say(f"cannot use the job's config ({e}): no in-job restarts, no spare")
        restart, preload = RestartConfig(in_job=0), []
        args.spare = False
    stop = Stop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
    if args.slurm_conf:
        os.environ["SLURM_CONF"] = args.slurm_conf
    agent = Agent(
        args.run_dir,
        args.group,
        step,
        restart,
        preload,
        args.spare,
        args.lighthouse,
        int(restarts) if restarts.isdigit() else 0,
        dict(os.environ),
        stop,
    )
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
