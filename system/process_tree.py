"""A replica group's OS process trees on this machine: start them in their own session, kill all of them.

(OS process groups and sessions, not torchft's ProcessGroup, which is a communicator.)

Every process (rank) of one attempt of a group is started in a new session of
its own, so it leads a process group (setpgid cannot join a group in another
session). Killing the group signals those process groups and every
descendant the trainers started that left them, identified by PID and
creation time, and nothing else: a leader stays an unreaped zombie until the
kill is over, so its process-group ID cannot be reused by a stranger while
we signal it.

A descendant can also have left the tree: torchrun starts its workers in
sessions of their own, and when the agent itself dies (OOM-killed, SIGKILLed)
they are orphans that go on training, a ghost replica of the group. So the
members also include every process whose exec-time environment names this
attempt of this group in this run (the variables the launcher gave it, which
its children inherit).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from lamplighter.rundir.contract import ENV_ATTEMPT, ENV_REPLICA_ID, ENV_RUN_DIR
from lamplighter.system.trainer_proc import TrainerProc


class StartError(RuntimeError):
    """Starting a process failed; the message names the group and the command."""


Mark = tuple[tuple[str, str], ...]
MARK_VARS = (ENV_RUN_DIR, ENV_REPLICA_ID, ENV_ATTEMPT)


def mark_of(env: Mapping[str, str]) -> Mark | None:
    """The variables that name one attempt of one group in one run, when the environment has them all."""
    if not all(k in env for k in MARK_VARS):
        return None
    return tuple((k, env[k]) for k in MARK_VARS)


def _marked(p: psutil.Process, mark: Mark | None) -> bool:
    if mark is None or p.pid == os.getpid():
        return False
    try:
        env = p.environ()
    except psutil.Error:
        return False
    return all(env.get(k) == v for k, v in mark)


def _members(leaders: Sequence[subprocess.Popen[bytes]], mark: Mark | None = None) -> list[psutil.Process]:
    """Processes in our process groups (led by unreaped leaders), descendants of our processes that left them,
    and processes marked as this attempt's that left the tree (orphans of a dead launcher)."""
    pgids = {p.pid for p in leaders if p.returncode is None}
    found: dict[int, psutil.Process] = {}
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) in pgids or _marked(p, mark):
                found[p.pid] = p
        except (ProcessLookupError, psutil.Error):
            continue
    for popen in leaders:
        if popen.returncode is not None:  # reaped: its PID may already be someone else's
            continue
        try:
            for child in psutil.Process(popen.pid).children(recursive=True):
                found.setdefault(child.pid, child)
        except psutil.Error:
            continue
    return list(found.values())


def kill_tree(
    popens: Sequence[subprocess.Popen[bytes]], timeout_s: float = 10.0, mark: Mark | None = None
) -> list[int]:
    """SIGKILL our processes' process groups and descendants (and the attempt's marked orphans); reap our
    processes. Returns the PIDs signalled."""
    members = _members(popens, mark)
    for p in popens:
        if p.returncode is None:  # unreaped: the PID, and so the process group, is still ours
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for m in members:
        try:
            m.kill()  # psutil checks the creation time: never a recycled PID
        except psutil.Error:
            pass
    ours = {p.pid for p in popens}
    # psutil would reap our own children and hide their status from Popen: wait for those through Popen.
    psutil.wait_procs([m for m in members if m.pid not in ours], timeout=timeout_s)
    for p in popens:
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
    return sorted(m.pid for m in members)


def signal_tree(popens: Sequence[subprocess.Popen[bytes]], sig: signal.Signals, mark: Mark | None = None) -> list[int]:
    """Send `sig` to every member (chaos: SIGSTOP makes a group hang)."""
    members = _members(popens, mark)
    for m in members:
        try:
            m.send_signal(sig)
        except psutil.Error:
            pass
    return sorted(m.pid for m in members)


@dataclass
class GroupProcesses:
    """The processes of one attempt of one replica group."""

    group: int
    attempt: int
    started_at: float
    popens: list[subprocess.Popen[bytes]] = field(default_factory=list)
    log_path: Path | None = None
    mark: Mark | None = None  # the environment that names this attempt's processes (mark_of)

    @classmethod
    def start(
        cls,
        *,
        group: int,
        attempt: int,
        argv: Sequence[Sequence[str]],
        envs: Sequence[dict[str, str]],
        log_path: Path,
        started_at: float,
        cwd: Path | None = None,
    ) -> GroupProcesses:
        """Start one process per rank (argv[i] with envs[i], the full environment), sharing one new session."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        gp = cls(group=group, attempt=attempt, started_at=started_at, log_path=log_path, mark=mark_of(envs[0]))
        with open(log_path, "ab") as log:
            for rank, (args, env) in enumerate(zip(argv, envs, strict=True)):
                try:
                    p = subprocess.Popen(
                        list(args),
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                        cwd=cwd,
                    )
                except OSError as e:
                    if gp.popens:
                        gp.kill()
                    raise StartError(
                        f"group {group} attempt {attempt} rank {rank}: cannot start {list(args)!r}: {e}"
                    ) from e
                gp.popens.append(p)
        return gp

    @classmethod
    def adopt(
        cls,
        *,
        group: int,
        attempt: int,
        popens: list[subprocess.Popen[bytes]],
        log_path: Path,
        started_at: float,
        env: Mapping[str, str] | None = None,
    ) -> GroupProcesses:
        """Processes already running this attempt's ranks (warm standbys, standby.py), each leading a session
        as start() would have made it; `env`: the environment they were given (what their children inherit)."""
        mark = None if env is None else mark_of(env)
        return cls(
            group=group, attempt=attempt, started_at=started_at, popens=list(popens), log_path=log_path, mark=mark
        )

    def trainers(self) -> list[TrainerProc]:
        return [
            TrainerProc(group=self.group, rank=r, attempt=self.attempt, pid=p.pid, started_at=self.started_at)
            for r, p in enumerate(self.popens)
        ]

    def running(self) -> bool:
        """True while any rank has not exited (a zombie counts as exited)."""
        for p in self.popens:
            try:
                if psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE:
                    return True
            except psutil.Error:
                continue
        return False

    def kill(self, timeout_s: float = 10.0) -> list[int]:
        return kill_tree(self.popens, timeout_s, self.mark)

    def signal(self, sig: signal.Signals) -> list[int]:
        return signal_tree(self.popens, sig, self.mark)
