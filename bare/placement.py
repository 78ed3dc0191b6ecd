"""Which group runs on which host: a pure decision over what etcd holds, with a reason for every move.

A group moves when it has no host, when its host's lease expired (dead or cut
off), when its host was taken out (a GPU fault; until `hosts resume`), or when
its trainer cannot be restarted there (the host daemon said so, for that
epoch). It goes to the first usable host of the configured order that holds no
group: the job's hosts first, then the spares. Every move raises the group's
epoch; trainers started under an older epoch are stale and are fenced. With no
usable host the group is unassigned (its epoch raised all the same, so its old
host's trainers are fenced) and waits, said once, not rewritten every cycle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class HostView:
    name: str
    alive: bool  # its lease is alive
    out: str | None = None  # why it was taken out, if it was
    spare: bool = False

    @property
    def usable(self) -> bool:
        return self.alive and self.out is None


@dataclass(frozen=True)
class Assignment:
    host: str | None
    epoch: int
    reason: str = ""

    def to_json(self) -> str:
        return json.dumps({"host": self.host, "epoch": self.epoch, "reason": self.reason}, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Assignment:
        d = json.loads(text)
        return Assignment(d.get("host"), int(d["epoch"]), str(d.get("reason", "")))


@dataclass(frozen=True)
class Move:
    group: int
    old: Assignment | None
    new: Assignment


def why_move(a: Assignment | None, hosts: Mapping[str, HostView], failed_on: str | None) -> str | None:
    """Why group's current assignment cannot stay; None when it can."""
    if a is None:
        return "not placed yet"
    if a.host is None:
        return "waiting for a host"
    h = hosts.get(a.host)
    if h is None:
        return f"host {a.host} is no longer in the host list"
    if not h.alive:
        return f"host {a.host}'s lease expired (dead or cut off)"
    if h.out is not None:
        return f"host {a.host} was taken out: {h.out}"
    if failed_on == a.host:
        return f"its trainer cannot be restarted on {a.host}"
    return None


def place(
    groups: int,
    assigned: Mapping[int, Assignment],
    hosts: Sequence[HostView],
    failed_on: Mapping[int, str] | None = None,
) -> list[Move]:
    """The moves that give every group of `range(groups)` a usable host of its own (config order, spares last)."""
    failed_on = failed_on or {}
    by_name = {h.name: h for h in hosts}
    order = [h for h in hosts if not h.spare] + [h for h in hosts if h.spare]
    keep: dict[int, str] = {}
    need: list[tuple[int, str]] = []
    for g in range(groups):
        a = assigned.get(g)
        why = why_move(a, by_name, failed_on.get(g))
        if why is None and a is not None and a.host is not None:
            keep[g] = a.host
        else:
            need.append((g, why or "not placed yet"))
    taken = set(keep.values())
    moves: list[Move] = []
    for g, why in need:
        old = assigned.get(g)
        epoch = (old.epoch if old else 0) + 1
        free = next((h for h in order if h.usable and h.name not in taken and h.name != failed_on.get(g)), None)
        if free is None:
            if old is not None and old.host is None:
                continue  # already waiting: said once
            moves.append(Move(g, old, Assignment(None, epoch, f"{why}; no usable host free: waiting")))
            continue
        taken.add(free.name)
        where = "spare " if free.spare else ""
        moves.append(Move(g, old, Assignment(free.name, epoch, f"{why}: to {where}{free.name}")))
    return moves
