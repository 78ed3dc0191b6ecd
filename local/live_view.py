"""What a person watching a long run sees: a compact table redrawn in place on a terminal,
plain progress lines otherwise. Events (faults, kills, restarts) are printed as they happen."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

from lamplighter.report.step_tail import GroupProgress


@dataclass(frozen=True)
class GroupRow:
    group: int
    state: str  # running / healing / backoff / hung? / done / given up ...
    restarts: int
    progress: GroupProgress


def _fmt_row(row: GroupRow, now: float) -> str:
    p = row.progress
    loss = f"{p.last.loss:.4f}" if p.last and p.last.state_hash else "-"  # no hash: steps from the Lighthouse
    age = f"{now - p.last_commit_t:5.1f}s" if p.last_commit_t else "    -"
    parts = p.last.participants if p.last else 0
    return (
        f"  group {row.group:<3} {row.state:<10} step {p.last_step:>6}  loss {loss:>8}  last commit {age} ago  "
        f"quorum {parts}  restarts {row.restarts}"
    )


class LiveView:
    def __init__(self, out: TextIO | None = None, *, live: bool = True, plain_every_s: float = 5.0) -> None:
        self._out = out or sys.stdout
        self._tty = live and self._out.isatty()
        self._enabled = live
        self._lines_drawn = 0
        self._last_draw = 0.0
        self._plain_every = plain_every_s

    def event(self, now: float, t0: float, text: str) -> None:
        """One line that stays: a fault, a kill, a restart, a give-up."""
        self._clear()
        print(f"[lamplighter local +{now - t0:7.1f}s] {text}", file=self._out, flush=True)

    def update(
        self, now: float, t0: float, rows: list[GroupRow], steps_per_s: float, target: int, lighthouse: str, faults: int
    ) -> None:
        if not self._enabled:
            return
        if self._tty:
            if now - self._last_draw < 1.0:
                return
            self._clear()
            head = (
                f"lamplighter local  +{now - t0:6.1f}s  {steps_per_s:5.2f} steps/s  target {target}  "
                f"lighthouse {lighthouse}  faults {faults}"
            )
            lines = [head] + [_fmt_row(r, now) for r in rows]
            self._out.write("\n".join(lines) + "\n")
            self._out.flush()
            self._lines_drawn = len(lines)
        else:
            if now - self._last_draw < self._plain_every:
                return
            steps = " ".join(f"g{r.group}={r.progress.last_step}({r.state})" for r in rows)
            print(
                f"[lamplighter local +{now - t0:7.1f}s] {steps_per_s:.2f} steps/s  {steps}  faults {faults}",
                file=self._out,
                flush=True,
            )
        self._last_draw = now

    def _clear(self) -> None:
        if self._tty and self._lines_drawn:
            self._out.write(f"\x1b[{self._lines_drawn}F\x1b[J")
            self._lines_drawn = 0
            self._last_draw = 0.0
