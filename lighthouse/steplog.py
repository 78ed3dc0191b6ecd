"""A step log written by the supervisor from the Lighthouse, for trainers that keep none of their own.

lamplighter's reference trainer logs every step with a hash of its state
(rundir/steplog.py). Any other torchft trainer tells the Lighthouse its step
at every quorum; the supervisor records each change, one JSON line per
(replica process, step), and the report reads these lines as step records
with no state hash and no sample count (each step counts as one sample).

A line is written when a process's step changes, never while it is
recovering (it reports step 0 until it has healed) nor for step 0 (nothing
committed yet). A process is one
Lighthouse replica id ("<name>:<uuid>", new on every start); its attempt is
the order in which its group's processes first appeared. Once a newer process
of a group has a line, an older one gets none: the supervisor replaced it
(killed, or stopped and killed), so it commits nothing more, and a late sight
of it in the Lighthouse's previous quorum (a hung member's last quorum, read
on a slow poll) would read as a rollback of every step since.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from lamplighter.lighthouse.progress import group_of
from lamplighter.lighthouse.status import LighthouseStatus
from lamplighter.rundir.steplog import StepRecord


class LighthouseStepLog:
    def __init__(self, path: Path) -> None:
        """Appends to `path`; what it holds already (a restarted recorder) is read back first."""
        self.path = path
        self._last: dict[str, int] = {}
        self._attempts: dict[str, int] = {}
        self._per_group: dict[int, int] = {}
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = ""
        for line in text.splitlines():
            try:
                o = json.loads(line)
                rid, g, attempt, step = str(o["replica"]), int(o["group"]), int(o["attempt"]), int(o["step"])
            except (ValueError, KeyError, TypeError):
                continue
            self._last[rid] = step
            self._attempts[rid] = attempt
            self._per_group[g] = max(self._per_group.get(g, 0), attempt + 1)

    def record(self, now: float, status: LighthouseStatus) -> int:
        """Append the steps that changed since the last call; returns how many lines were written."""
        lines = []
        for m in status.members:
            g = group_of(m.replica_id)
            if g is None or m.recovering or m.step == 0 or self._last.get(m.replica_id) == m.step:
                continue
            if m.replica_id not in self._attempts:
                self._attempts[m.replica_id] = self._per_group.get(g, 0)
                self._per_group[g] = self._attempts[m.replica_id] + 1
            if self._attempts[m.replica_id] < self._per_group[g] - 1:
                continue
            self._last[m.replica_id] = m.step
            lines.append(
                {
                    "t": now,
                    "group": g,
                    "replica": m.replica_id,
                    "attempt": self._attempts[m.replica_id],
                    "step": m.step,
                    "participants": len(status.members),
                    "quorum_id": status.previous_quorum_id or status.quorum_id,
                }
            )
        if lines:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.writelines(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
        return len(lines)


def parse_lighthouse_line(line: str) -> StepRecord | None:
    """One recorded line as a step record (no hash, one sample, one timeline), or None if torn."""
    try:
        o = json.loads(line)
        return StepRecord(
            t=float(o["t"]),
            replica_id=int(o["group"]),
            step=int(o["step"]),
            committed=True,
            participants=int(o["participants"]),
            # Quorum ids move with membership, not with steps: the report's two-timelines rule
            # cannot be read from the Lighthouse, so all lines share one id.
            quorum_id=0,
            healed_from=None,
            loss=0.0,
            state_hash="",
            attempt=int(o["attempt"]),
            samples=1,
            first_sample=0,
        )
    except (ValueError, KeyError, TypeError):
        return None


def groups_recorded(text: str) -> set[int]:
    """The groups with at least one recorded step in these lines (torn lines skipped)."""
    out = set()
    for line in text.splitlines():
        rec = parse_lighthouse_line(line)
        if rec is not None and rec.step > 0:
            out.add(rec.replica_id)
    return out


def read_lighthouse_steps(path: Path, groups: Iterable[int]) -> dict[int, list[StepRecord]]:
    """The recorded lines as step records per group."""
    out: dict[int, list[StepRecord]] = {g: [] for g in groups}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        rec = parse_lighthouse_line(line)
        if rec is not None:
            out.setdefault(rec.replica_id, []).append(rec)
    return out
