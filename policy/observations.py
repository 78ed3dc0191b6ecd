"""What the supervisor's checks saw: small frozen records, each with a human reason.

Trainer observations carry the group's `attempt` so that an observation about
a process from an earlier attempt (a straggler exit after a kill) is never
blamed on the group's replacement.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass


def describe_exit(returncode: int) -> str:
    """'exit 75' or 'killed by SIGKILL' from a Popen-style return code (negative: signal)."""
    if returncode >= 0:
        return f"exit {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"killed by {name}"


@dataclass(frozen=True)
class ProcessExited:
    """A trainer process ended (returncode < 0: killed by that signal)."""

    group: int
    rank: int
    attempt: int
    pid: int
    returncode: int
    t: float

    @property
    def reason(self) -> str:
        return f"group {self.group} rank {self.rank} (pid {self.pid}, attempt {self.attempt}) {describe_exit(self.returncode)}"


@dataclass(frozen=True)
class Hung:
    """A replica group made no progress for longer than its hang (or start-up) timeout."""

    group: int
    attempt: int
    pid: int  # its first process, for the log
    last_step: int | None
    silent_s: float
    timeout_s: float
    source: str = "heartbeat"  # where progress was read: heartbeat, lighthouse, or both
    started: bool = True  # it had made progress in this attempt (else: start-up timeout)
    finishing: bool = False  # it had reached the job's last step (start-up timeout too)
    limit_why: str = ""  # where timeout_s came from, when not the plain hang timeout (a learned pace)

    @property
    def reason(self) -> str:
        if not self.started:
            return (
                f"group {self.group} (attempt {self.attempt}, pid {self.pid}) hung: no progress for "
                f"{self.silent_s:.1f} s since it started (startup_timeout_s {self.timeout_s:g}; progress from {self.source})"
            )
        at = "" if self.last_step is None else f" after step {self.last_step}"
        limit = "startup_timeout_s, finishing" if self.finishing else "hang_timeout_s"
        said = f"{limit} {self.timeout_s:g}"
        if not self.finishing and self.limit_why and not self.limit_why.startswith("hang_timeout_s"):
            said = f"limit {self.timeout_s:.1f} s: {self.limit_why}"
        return (
            f"group {self.group} (attempt {self.attempt}, pid {self.pid}) hung: no progress for {self.silent_s:.1f} s"
            f"{at} ({said}; progress from {self.source})"
        )


@dataclass(frozen=True)
class DState:
    """A process of a trainer's tree has been in uninterruptible sleep (D) too long."""

    group: int
    rank: int
    attempt: int
    pid: int
    stuck_s: float
    limit_s: float

    @property
    def reason(self) -> str:
        return (
            f"group {self.group} rank {self.rank}: pid {self.pid} in uninterruptible sleep (D) for "
            f"{self.stuck_s:.1f} s (d_state_max_s {self.limit_s:g})"
        )


@dataclass(frozen=True)
class MemoryHigh:
    """A trainer's process tree uses more of the node's memory than allowed."""

    group: int
    rank: int
    attempt: int
    pid: int
    rss_bytes: int
    percent: float
    limit_percent: float

    @property
    def reason(self) -> str:
        return (
            f"group {self.group} rank {self.rank} (pid {self.pid}) uses {self.rss_bytes / 2**20:.0f} MiB, "
            f"{self.percent:.1f}% of memory (memory_max_percent {self.limit_percent:g})"
        )


@dataclass(frozen=True)
class StartFailed:
    """Starting a group's processes failed (bad command, missing binary...)."""

    group: int
    attempt: int
    message: str

    @property
    def reason(self) -> str:
        return f"group {self.group} attempt {self.attempt} failed to start: {self.message}"


@dataclass(frozen=True)
class LighthouseDown:
    """The Lighthouse process ended."""

    pid: int
    returncode: int
    t: float

    @property
    def reason(self) -> str:
        return f"Lighthouse (pid {self.pid}) {describe_exit(self.returncode)}"


@dataclass(frozen=True)
class LinkFault:
    """A link training uses is missing, down, or flapping (supervisor/checks/links.py)."""

    link: str  # interface name, or RDMA DEVICE:PORT
    kind: str  # link-missing, link-down, link-flapping (policy/node_faults.py)
    detail: str

    @property
    def reason(self) -> str:
        return f"link {self.link} {self.detail}"


@dataclass(frozen=True)
class GpuCountLow:
    """Fewer GPUs found than the node config's gpu_count."""

    expected: int
    found: int
    kind: str = "gpu-count"

    @property
    def reason(self) -> str:
        return f"{self.found} of {self.expected} GPUs found (gpu_count {self.expected} in the node config)"


TrainerObservation = ProcessExited | Hung | DState | MemoryHigh | StartFailed
Observation = TrainerObservation | LighthouseDown
