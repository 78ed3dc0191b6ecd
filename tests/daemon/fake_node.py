"""A compute node for the daemon's loop, all fakes: /proc in a folder, Slurm in memory, exits and the Lighthouse by hand.

A task is what slurmstepd would make of it: its /proc/PID/cgroup names its job and step as a multiple-slurmd
test cluster's cgroup v1 does (`6:freezer:/slurm_n1/uid_U/job_J/step_S`), its status names its uid, and its
environment is whatever the test gives it (the daemon reads only run dir, config and renewals from it).

The PIDs are above the kernel's largest possible PID (2**22), so the real
executor's kill (it signals whatever /proc says is still there) can never
reach a real process: it finds each one "already gone".
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lamplighter.configs.schema import JobConfig, NodeConfig
from lamplighter.lab.fake_slurm import FakeSlurm
from lamplighter.lighthouse.status import LighthouseStatus, LighthouseStatusError, Member
from lamplighter.policy.observations import Observation, ProcessExited
from lamplighter.rundir.actions import ActionLog
from lamplighter.rundir.contract import ENV_CONFIG, ENV_JOB, ENV_REPLICA_ID, ENV_RUN_DIR, RunPaths, write_json_atomic
from lamplighter.supervisor.checks.links import LinkReader
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.metrics import DaemonMetrics
from lamplighter.supervisor.node.loop import ComputeLoop, compute_executor_parts
from lamplighter.supervisor.state_store import DaemonState
from lamplighter.system.trainer_proc import TrainerProc

BTIME = 1_700_000_000
CLK_TCK = 100
PID0 = 5_000_000  # above any real PID
NODE = "n1"


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeExits:
    """Reports an exit only for a watched process, as a pidfd would."""

    def __init__(self) -> None:
        self.watched: dict[int, TrainerProc] = {}
        self._pending: list[Observation] = []

    def watch_trainer(self, proc: TrainerProc) -> None:
        self.watched[proc.pid] = proc

    def exit(self, pid: int, returncode: int, t: float) -> None:
        p = self.watched.pop(pid, None)
        if p is not None:
            self._pending.append(ProcessExited(p.group, p.rank, p.attempt, pid, returncode, t))

    def observe(self, now: float) -> list[Observation]:
        out, self._pending = self._pending, []
        return out

    def close(self) -> None:
        pass


@dataclass
class FakeLighthouse:
    """The job's Lighthouse /status: replica id -> step; `down` makes every read fail."""

    steps: dict[str, int] = field(default_factory=dict)
    down: bool = False
    reads: list[tuple[str, float]] = field(default_factory=list)  # (address, timeout) of every read

    def __call__(self, address: str, timeout_s: float) -> LighthouseStatus:
        self.reads.append((address, timeout_s))
        if self.down:
            raise LighthouseStatusError(f"cannot read {address}/status: connection refused")
        members = [Member(rid, step, "m", "s", 1, False) for rid, step in self.steps.items()]
        return LighthouseStatus(quorum_id=1, next_quorum="", previous_quorum_id=None, quorum_age_s=0.0, members=members)


class FakeGpus:
    """The GPU check: reports what a test put in `next` on the next cycle (GPU VM fault events are one-shot)."""

    def __init__(self) -> None:
        self.next: list[GpuObservation] = []
        self.steady: list[GpuObservation] = []  # what every other cycle reads (the real check reads every GPU)
        self.probes: list[float] = []  # when each probe ran

    def observe(self, now: float) -> list[GpuObservation]:
        self.probes.append(now)
        out, self.next = self.next or list(self.steady), []
        return out

    def close(self) -> None:
        pass


class FakeNode:
    def __init__(
        self,
        tmp: Path,
        links: LinkReader | None = None,
        name: str = NODE,
        slurm: FakeSlurm | None = None,
        clock: Clock | None = None,
        **node: Any,
    ) -> None:
        """`name`, `slurm`, `clock`: a second node of the same fake cluster shares the first one's Slurm and clock."""
        self.links = links
        self.name = name
        self.proc = tmp / "proc"
        self.proc.mkdir()
        (self.proc / "stat").write_text(f"cpu 1 2 3\nbtime {BTIME}\n")
        (self.proc / "meminfo").write_text("MemTotal:       1000000 kB\n")
        self.tmp = tmp
        self.clock = clock or Clock(BTIME + 10.0)
        self.slurm = slurm or FakeSlurm(["n1", "n2", "n3"], clock=self.clock)
        self.exits = FakeExits()
        self.lighthouse = FakeLighthouse()
        self.gpus = FakeGpus()
        self.node_cfg = node
        self.cleanup: list[Path] = []
        self.start()

    def start(self) -> None:
        """Start the daemon on this node: load its state, build its loop (again after `stop`: a restart)."""
        tmp = self.tmp
        self.lines: list[str] = []
        self.state = DaemonState.load(tmp / "state")
        node_cfg = dict(self.node_cfg)
        # The node checks' tests count passes cycle by cycle: idle, it probes every cycle unless a test says.
        node_cfg["health"] = {"idle_probe_interval_s": 1.0, **node_cfg.get("health", {})}
        cfg = NodeConfig(node_name=self.name, **node_cfg)
        # As `lamplighter supervise` builds them: the executor with its run-dir writer over the jobs seen here.
        seen, run_dir_writer = compute_executor_parts()
        executor = Executor(
            self.state,
            self.slurm,
            None,
            ActionLog(self.name, self.lines.append),
            proc_root=self.proc,
            clock=self.clock,
            job_log=run_dir_writer,
            observe=cfg.mode == "observe",
        )
        self.metrics = DaemonMetrics()
        self.loop = ComputeLoop(
            cfg,
            self.name,
            self.slurm,
            executor,
            self.gpus,
            self.clock,
            seen,
            metrics=self.metrics,
            proc_root=self.proc,
            watcher=self.exits,
            fetch_lighthouse=self.lighthouse,
            links=self.links,
        )

    def close(self) -> None:
        self.loop.close()
        self.state.close()

    def remove(self) -> None:
        """Remove what job_dir made outside the test's own folder."""
        for d in self.cleanup:
            shutil.rmtree(d, ignore_errors=True)

    def submit(self, name: str, group: int, user_id: int = 0) -> int:
        script = self.tmp / f"{name}-g{group}.sbatch"
        script.write_text(f"#!/bin/bash\n#SBATCH --job-name=ll-{name}-g{group}\n#SBATCH --nodes=1\n")
        return self.slurm.submit(script, user_id=user_id)

    def job_dir(
        self, job: JobConfig | dict[str, Any], lighthouse: str | None = None, owner: int = 0
    ) -> tuple[Path, Path]:
        """A run directory with its job.json (a dict: written as it is, valid or not), and lighthouse.json.

        `owner`: the job's user; another user's run directory sits in a folder of its own under /tmp that
        every user may reach (pytest's own folder is its user's only), and is that user's, files and all."""
        name = job.name if isinstance(job, JobConfig) else str(job["name"])
        if owner == 0:
            run_dir = self.tmp / "runs" / name
        else:
            base = Path(tempfile.mkdtemp(prefix="ll-fake-node-"))
            base.chmod(0o755)
            self.cleanup.append(base)
            run_dir = base / name
        run_dir.mkdir(parents=True, exist_ok=True)
        config = run_dir / "job.json"
        doc = job.model_dump(mode="json") if isinstance(job, JobConfig) else job
        config.write_text(json.dumps({**doc, "run_dir": str(run_dir)}, indent=2))
        if lighthouse is not None:
            write_json_atomic(RunPaths(run_dir).lighthouse(), {"address": lighthouse}, mode=0o644)
        if owner != 0:
            for f in [run_dir, *run_dir.iterdir()]:
                os.chown(f, owner, owner)
        return run_dir, config

    def task(
        self,
        pid: int,
        job_id: int,
        name: str,
        group: int,
        *,
        ppid: int = PID0,
        run_dir: Path | None = None,
        config: Path | None = None,
        start: int | None = None,
        rank: int = 0,
        step: str = "0",
        uid: int = 0,
        cgroup_job: int | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        """A process of a Slurm task on this node (the root if its parent is not one of the job's step).

        `cgroup_job`: the job its cgroup names (default `job_id`, which its environment names): a process
        that carries one job's variables in another job's cgroup is a forgery. `start`: clock ticks after boot
        (default: now, as slurmstepd starts a task of a running job)."""
        start = self.ticks() if start is None else start
        env = {
            ENV_JOB: name,
            ENV_REPLICA_ID: str(group),
            "SLURM_JOB_ID": str(job_id),
            "SLURM_STEP_ID": "0",
            "SLURM_PROCID": str(rank),
            "SLURMD_NODENAME": self.name,
        }
        if run_dir is not None:
            env[ENV_RUN_DIR] = str(run_dir)
        if config is not None:
            env[ENV_CONFIG] = str(config)
        env.update(extra_env or {})
        d = self.proc / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        fields = [str(pid), "(python)", "S", str(ppid)] + ["0"] * 17 + [str(start), "0", "10"] + ["0"] * 28
        (d / "stat").write_text(" ".join(fields) + "\n")
        (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
        cg = cgroup_job if cgroup_job is not None else job_id
        (d / "cgroup").write_text(f"7:pids:/\n6:freezer:/slurm_{self.name}/uid_{uid}/job_{cg}/step_{step}\n0::/\n")
        (d / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nNSpid:\t{pid}\n")

    def ticks(self) -> int:
        """The fake clock's now, as a process start time (clock ticks after boot)."""
        return int((self.clock.t - BTIME) * CLK_TCK)

    def gone(self, pid: int, returncode: int = 0) -> None:
        """The process ends: out of /proc, and the exit reported if it was watched."""
        for f in (self.proc / str(pid)).iterdir():
            f.unlink()
        (self.proc / str(pid)).rmdir()
        self.exits.exit(pid, returncode, self.clock.t)

    def run(self, seconds: float, step_s: float = 1.0, each: Callable[[], None] | None = None) -> list[dict[str, Any]]:
        """Cycle the loop for `seconds` of fake time; every action result."""
        results: list[dict[str, Any]] = []
        end = self.clock.t + seconds
        while self.clock.t < end:
            if each is not None:
                each()
            results += self.loop.cycle()
            self.clock.t += step_s
        return results
