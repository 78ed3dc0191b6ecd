"""Finding a benchmark run's trainer processes and hurting them: by an environment marker, never by name.

Slurm's nodes on this machine live in their own PID namespaces, so the PID a
trainer writes into its heartbeat is not the one the host sees; /proc of the
root namespace shows every process with its real PID and its exec-time
environment, where the run's marker (BENCH_RUN) and the replica's index are.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from lamplighter.trainer.contract import ENV_REPLICA_ID

ENV_MARK = "BENCH_RUN"  # set in every trainer a benchmark run starts: the run's unique id
TRAINER_MODULES = ("lamplighter.trainer", "bench.gpu_time_trainer", "bench.baselines.ckpt_trainer")


def _environ(pid: str) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        k, eq, v = item.partition(b"=")
        if eq:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def _state(pid: str) -> str:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    return raw[raw.rindex(")") + 2 :].split()[0]


def find_trainers(run_id: str) -> dict[int, int]:
    """Replica index (group, or DDP rank) -> host PID of the live trainers marked with `run_id`."""
    out: dict[int, int] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) < 3 or argv[1] != b"-m" or argv[2].decode(errors="replace") not in TRAINER_MODULES:
            continue
        env = _environ(pid)
        if env.get(ENV_MARK) != run_id or _state(pid) in ("Z", "X"):
            continue
        index = (
            env.get(ENV_REPLICA_ID)
            if argv[2] != b"bench.baselines.ckpt_trainer"
            else env.get("RANK", env.get("SLURM_PROCID"))
        )
        if index is not None and index.isdigit():
            out[int(index)] = int(pid)
    return out


def node_of(pid: int) -> str | None:
    """The Slurm node a trainer runs on (its slurmd set SLURMD_NODENAME)."""
    return _environ(str(pid)).get("SLURMD_NODENAME")


def hurt(pid: int, kind: str) -> None:
    """kill: SIGKILL; hang: SIGSTOP (the process keeps its sockets but never answers again)."""
    sig = {"kill": signal.SIGKILL, "hang": signal.SIGSTOP}[kind]
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def release(pids: list[int]) -> None:
    """SIGKILL stopped leftovers of a finished run (a SIGSTOPped trainer would otherwise live on)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
