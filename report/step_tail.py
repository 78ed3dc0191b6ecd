"""Following the groups' step logs as they grow, for the live view and the chaos injector.

A trainer other than the reference one keeps no step log: then the steps the
supervisor recorded from the Lighthouse (lighthouse_steplog.py) stand in for
it, for each group until its own step log appears.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lamplighter.lighthouse.steplog import parse_lighthouse_line
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import StepRecord, parse_step


@dataclass
class GroupProgress:
    """What the step log of one group has said so far."""

    last: StepRecord | None = None
    last_commit_t: float | None = None
    last_step: int = 0
    commits: int = 0
    first_commit_t: float | None = None
    commit_times: list[float] = field(default_factory=list)


class StepTail:
    """Reads only the new complete lines of each group's step log on every call."""

    def __init__(self, run_dir: Path, n_groups: int) -> None:
        self._paths = RunPaths(run_dir)
        self._lighthouse = self._paths.lighthouse_steps()
        self._offsets = [0] * n_groups
        self._lh_offset = 0
        self._own = [False] * n_groups
        self.groups = [GroupProgress() for _ in range(n_groups)]

    def poll(self) -> list[StepRecord]:
        """New records since the last call, all groups."""
        out: list[StepRecord] = []
        for g in range(len(self.groups)):
            out += self._read(g)
        for r in self._read_lines(self._lighthouse, -1, parse_lighthouse_line):
            if 0 <= r.replica_id < len(self.groups) and not self._own[r.replica_id]:
                self._add(r.replica_id, [r])
                out.append(r)
        return out

    def _read_lines(self, path: Path, g: int, parse: Callable[[str], StepRecord | None]) -> list[StepRecord]:
        offset = self._lh_offset if g < 0 else self._offsets[g]
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []  # a line still being written
        if g < 0:
            self._lh_offset += end + 1
        else:
            self._offsets[g] += end + 1
        return [r for line in data[: end + 1].decode(errors="replace").splitlines() if (r := parse(line))]

    def _read(self, g: int) -> list[StepRecord]:
        recs = self._read_lines(self._paths.steps(g), g, parse_step)
        if recs:
            self._own[g] = True
        self._add(g, recs)
        return recs

    def _add(self, g: int, recs: list[StepRecord]) -> None:
        gp = self.groups[g]
        for r in recs:
            gp.last = r
            if r.committed:
                gp.last_commit_t = r.t
                gp.last_step = r.step
                gp.commits += 1
                gp.commit_times.append(r.t)
                if gp.first_commit_t is None:
                    gp.first_commit_t = r.t

    def committed_since(self, g: int, t: float) -> bool:
        lc = self.groups[g].last_commit_t
        return lc is not None and lc > t

    def steps_per_s(self, now: float, window_s: float = 10.0) -> float:
        """Job steps per second over the last window (the fastest group's commits)."""
        best = 0.0
        for gp in self.groups:
            n = sum(1 for t in gp.commit_times if now - t <= window_s)
            best = max(best, n / window_s)
        return best
