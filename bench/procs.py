"""Finding a benchmark run's trainer processes and hurting them: by an environment marker, never by name.

Slurm's nodes on this machine live in their own PID namespaces, so the PID a
trainer writes into its heartbeat is not the one the host sees; /proc of the
root namespace shows every process with its real PID and its exec-time
environment, where the run's marker (BENCH_RUN) and the replica's index are.
"""

from __future__ import annotations

import os
import signal

from lamplighter.rundir.contract import ENV_REPLICA_ID
from lamplighter.slurm.chaos.proc_find import in_trainer_steps
from lamplighter.system import procfs
from lamplighter.system.procfs import PROC

ENV_MARK = "BENCH_RUN"  # set in every trainer a benchmark run starts: the run's unique id
TRAINER_MODULES = ("lamplighter.trainer", "bench.gpu_time_trainer", "bench.baselines.ckpt_trainer")
# A group's warm spare (slurm.spare) runs the standby; once it took over it is the trainer (its job's lowest step).
STANDBY_MODULE = "lamplighter.launch.standby"


def _environ(pid: int) -> dict[str, str]:
    return procfs.read_environ(PROC, pid) or {}


def _state(pid: int) -> str:
    st = procfs.read_stat(PROC, pid)
    return "X" if st is None else st.state


def find_trainers(run_id: str) -> dict[int, int]:
    """Replica index (group, or DDP rank) -> host PID of the live trainers marked with `run_id`."""
    found: list[tuple[procfs.ProcStat, str | None]] = []
    for pid in procfs.pids(PROC):
        argv = procfs.read_cmdline(PROC, pid)
        if argv is None:
            continue
        module = argv[2].decode(errors="replace") if len(argv) >= 3 and argv[1] == b"-m" else ""
        if module not in (*TRAINER_MODULES, STANDBY_MODULE):
            continue
        env = _environ(pid)
        st = procfs.read_stat(PROC, pid)
        if env.get(ENV_MARK) != run_id or st is None or st.state in ("Z", "X"):
            continue
        index = (
            env.get(ENV_REPLICA_ID)
            if module != "bench.baselines.ckpt_trainer"
            else env.get("RANK", env.get("SLURM_PROCID"))
        )
        found.append((st, index))
    out: dict[int, int] = {}
    trainers = {st.pid for st in in_trainer_steps([st for st, _ in found])}
    for st, index in found:
        if st.pid in trainers and index is not None and index.isdigit():
            out[int(index)] = st.pid
    return out


def node_of(pid: int) -> str | None:
    """The Slurm node a trainer runs on (its slurmd set SLURMD_NODENAME)."""
    return _environ(pid).get("SLURMD_NODENAME")


def is_stopped(pid: int) -> bool:
    """SIGSTOPped (or traced-stopped): it keeps its sockets and answers nothing."""
    return _state(pid) in ("T", "t")


def signal_pid(pid: int, sig: signal.Signals) -> bool:
    """Send sig; False when the process was gone already."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def release(pids: list[int]) -> None:
    """SIGKILL stopped leftovers of a finished run (a SIGSTOPped trainer would otherwise live on)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
