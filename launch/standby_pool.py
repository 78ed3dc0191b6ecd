"""Warm standbys on this machine: processes past `import torch` that a restart turns into the group's trainers.

The pool keeps `restart.standby` of them (standby.py is their side). A
restart takes one per rank when the group's command can run in place (the
same interpreter, `python -m MODULE` or `python SCRIPT`) and enough are
alive; otherwise it starts cold, as without a pool, and says why once. The
pool refills only when the caller says no group is starting: a standby's own
imports would otherwise take the CPU from the trainer it just replaced.

A standby that dies before it is used is logged and replaced; after
MAX_DEATHS in a row (a preload that cannot import, say) the pool gives up and
every restart starts cold.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lamplighter.launch.standby import READY, Activation, target_of

MAX_DEATHS = 3
STANDBY_MODULE = "lamplighter.launch.standby"


@dataclass
class Standby:
    popen: subprocess.Popen[bytes]
    log_path: Path
    channel: socket.socket  # our end of the socketpair that is the standby's stdin

    def alive(self) -> bool:
        return self.popen.poll() is None

    def ready(self) -> bool:
        """Its preload is done (it said so in its own log)."""
        try:
            return READY in self.log_path.read_text(errors="replace")
        except OSError:
            return False

    def activate(self, act: Activation) -> bool:
        """Hand it its trainer; False when it can no longer take it (it died meanwhile)."""
        try:
            self.channel.sendall(act.line().encode())
        except OSError:
            return False
        finally:
            self.channel.close()
        return True

    def retire(self) -> None:
        """End of input: a standby nobody needs exits 0 (SIGKILL only if it does not)."""
        self.channel.close()
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


class StandbyPool:
    def __init__(
        self,
        *,
        size: int,
        python: str,
        preload: Sequence[str],
        env: dict[str, str],
        log_dir: Path,
        say: Callable[[str], None],
    ) -> None:
        self.size, self.python, self.preload = size, python, list(preload)
        self.env, self.log_dir, self.say = env, log_dir, say
        self.idle: list[Standby] = []
        self.started = 0
        self.deaths_in_a_row = 0
        self.used = 0
        self.used_before_ready = 0  # taken while still importing: warm, but not by the whole preload
        self.cold_reasons: set[str] = set()

    @property
    def given_up(self) -> bool:
        return self.deaths_in_a_row >= MAX_DEATHS

    def _spawn(self) -> Standby:
        self.started += 1
        log_path = self.log_dir / f"standby{self.started}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [self.python, "-m", STANDBY_MODULE]
        for name in self.preload:
            argv += ["--preload", name]
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with open(log_path, "ab") as log:
                popen = subprocess.Popen(
                    argv,
                    env=self.env,
                    stdin=theirs.fileno(),  # a socket: descriptors can travel with the activation
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # as a cold-started trainer: GroupProcesses kills by session
                )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return Standby(popen=popen, log_path=log_path, channel=ours)

    def _reap_dead(self) -> None:
        for s in [s for s in self.idle if not s.alive()]:
            self.idle.remove(s)
            self.deaths_in_a_row += 1
            tail = s.log_path.read_text(errors="replace").strip().splitlines()[-3:] if s.log_path.exists() else []
            self.say(
                f"WARNING: standby pid {s.popen.pid} exited {s.popen.returncode} before it was needed "
                f"({' | '.join(tail) or 'no output'}; log {s.log_path})"
                + ("; giving up on standbys: restarts start cold" if self.given_up else "")
            )

    def full_and_ready(self) -> bool:
        """Every standby it keeps is there, past its preload (or it gave up keeping them): the job at full strength."""
        return self.given_up or (len(self.idle) >= self.size and all(s.ready() for s in self.idle))

    def refill(self, quiet: bool) -> None:
        """Replace dead standbys and fill up to size, when `quiet` (no group is starting)."""
        self._reap_dead()
        while quiet and not self.given_up and len(self.idle) < self.size:
            self.idle.append(self._spawn())

    def why_cold(self, argvs: Sequence[Sequence[str]]) -> str | None:
        """Why these ranks cannot start from standbys now (None: they can)."""
        self._reap_dead()
        if self.given_up:
            return "standbys keep dying before use"
        for argv in argvs:
            if not argv or argv[0] != self.python or not target_of(list(argv)):
                return f"{list(argv)!r} is not `{self.python} -m MODULE ...` or `{self.python} SCRIPT ...`"
        if len(self.idle) < len(argvs):
            return f"{len(self.idle)} standby(s) idle for {len(argvs)} rank(s)"
        return None

    def take(
        self,
        argvs: Sequence[Sequence[str]],
        envs: Sequence[dict[str, str]],
        *,
        cwd: Path,
        log_path: Path,
    ) -> list[subprocess.Popen[bytes]] | None:
        """Turn one standby per rank into that rank's trainer, its output to `log_path`; None when they cannot
        (start cold then). All or none: a group is never half warm. A standby that died between the check and
        its activation sends the whole group cold; those activated are killed."""
        why = self.why_cold(argvs)
        if why is not None:
            if why not in self.cold_reasons:
                self.cold_reasons.add(why)
                self.say(f"restart starts cold: {why}")
            return None
        self.idle.sort(key=lambda s: not s.ready())  # those past their imports first
        mine, self.idle = self.idle[: len(argvs)], self.idle[len(argvs) :]
        self.used_before_ready += sum(1 for s in mine if not s.ready())
        popens = []
        for s, argv, env in zip(mine, argvs, envs, strict=True):
            act = Activation(argv=list(argv), env=dict(env), cwd=str(cwd), log=str(log_path))
            if not s.activate(act):
                for rest in mine:
                    rest.popen.kill()
                    rest.popen.wait()
                return None
            popens.append(s.popen)
        self.used += len(mine)
        self.deaths_in_a_row = 0
        return popens

    def close(self) -> None:
        for s in self.idle:
            s.retire()
        self.idle = []
