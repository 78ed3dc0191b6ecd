"""What a scheduled fault does to its group as the group is at that moment: struck, or absorbed (pure).

Faults are delivered at their time whatever the target's state, as on real hardware:
- kill (SIGKILL) strikes any process of the group there is: starting, healing, training, stopped or
  blocked (a kill frees a hung process: what a hung group costs ends there);
- hang (SIGSTOP: the process keeps its sockets and stops answering, heartbeats included) strikes a
  process that runs; one already stopped absorbs it;
- hang-collective (the trainer's main thread blocks inside its next step while its heartbeats go on)
  strikes a process that runs and is not blocked already;
- node-crash (the node's processes all die at once) strikes the node the group's process runs on.
A group with no process at all (its restart not begun, or the whole job down) absorbs any fault: there
is nothing to hit. The driver (bench/slurm_drive.py) carries out what this decides.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("kill", "hang", "hang-collective", "node-crash")
STRUCK, ABSORBED = "struck", "absorbed"


@dataclass(frozen=True)
class Target:
    """The group's trainer as the driver sees it at the fault's time."""

    pid: int | None  # host PID of the group's live trainer; None: no process
    stopped: bool = False  # SIGSTOPped (state T in /proc)
    blocked: bool = False  # a hang-collective of ours was delivered to this very process


@dataclass(frozen=True)
class Delivery:
    outcome: str  # STRUCK or ABSORBED
    action: str | None  # "sigkill", "sigstop", "hang-collective", "crash-node"; None when absorbed
    why: str


def decide(kind: str, target: Target) -> Delivery:
    if kind not in KINDS:
        raise ValueError(f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")
    if target.pid is None:
        return Delivery(ABSORBED, None, "no process of the group to hit")
    if kind == "kill":
        return Delivery(STRUCK, "sigkill", "the group's process is killed")
    if kind == "node-crash":
        return Delivery(STRUCK, "crash-node", "the node the group's process runs on crashes")
    if target.stopped:
        return Delivery(ABSORBED, None, "the group's process is stopped already")
    if kind == "hang":
        return Delivery(STRUCK, "sigstop", "the group's process stops")
    if target.blocked:
        return Delivery(ABSORBED, None, "the group's process is blocked in a collective already")
    return Delivery(STRUCK, "hang-collective", "the group's process blocks inside its next step")
