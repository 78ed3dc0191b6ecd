"""Hang check: a replica group that stopped making progress, or never started to.

A group is one attempt of one replica group (all its processes). Its progress
comes from the sources the job's `health.progress` names (progress.py,
lighthouse_progress.py): the latest answer of any of them wins, so a group
is never called hung while one source sees it advance.

- No progress since the attempt started: hung after `startup_timeout_s`
  (importing torch, loading a large model, joining the quorum and healing take
  minutes on a real cluster).
- Progress, then none: hung after `hang_timeout_s`, or longer for a job whose
  groups go longer between progress marks (a DiLoCo sync, a long step): the
  limit learned from the job's own pace (progress_pace.py), when the job
  sets `health.hang_pace_factor`.
- Progress up to the job's last step (`target_step`: trainer.steps, or the
  owner's stop-at step when smaller; the Lighthouse sees a step at the next
  quorum, so one short of it counts): the group is
  finishing (saving, shutting its process groups down), which is given
  `startup_timeout_s` too, not `hang_timeout_s`.

Silence the sources could not see (the Lighthouse unreadable, or restarting:
`excused_since`) does not count.

- Every group of the job silent at once (two or more that made progress, none
  within the limit; the Lighthouse sees the groups on other nodes too): a cause
  they share (a quorum change that waits for a restarted peer, the Lighthouse,
  a starved machine), not one group's hang. `startup_timeout_s` applies to
  each: with no checkpoint, killing every group would lose the weights, and the
  restarted groups would find no live peer to heal from. A hung group holds its
  peers only up to torchft's timeouts (validated below hang_timeout_s), so a
  real hang beside live peers is still seen after `hang_timeout_s`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from lamplighter.lighthouse.progress import LighthouseProgress
from lamplighter.policy.observations import Hung
from lamplighter.rundir.heartbeats import HeartbeatFiles, Progress, ProgressSource
from lamplighter.supervisor.checks.progress_pace import PaceRule, ProgressPace, hang_limit
from lamplighter.system.trainer_proc import ProcessTable

__all__ = ["GroupAttempt", "HangCheck", "HeartbeatFiles", "group_attempts", "progress_sources"]


@dataclass(frozen=True)
class GroupAttempt:
    group: int
    attempt: int
    started_at: float  # when its first process started
    pid: int  # its first rank's process (for the log)


def group_attempts(table: ProcessTable) -> list[GroupAttempt]:
    """The groups in a process table: one entry per (group, attempt), from its processes."""
    out: dict[tuple[int, int], GroupAttempt] = {}
    for p in sorted(table.trainers(), key=lambda p: (p.group, p.attempt, p.rank)):
        key = (p.group, p.attempt)
        have = out.get(key)
        if have is None or p.started_at < have.started_at:
            out[key] = GroupAttempt(p.group, p.attempt, p.started_at, have.pid if have else p.pid)
    return list(out.values())


def progress_sources(
    mode: str, run_dir: Path, lighthouse: LighthouseProgress | None, owner: int | None = None
) -> tuple[list[ProgressSource], str | None]:
    """The sources `health.progress` asks for, and a warning when one of them cannot be had."""
    if mode == "off":
        return [], None
    sources: list[ProgressSource] = []
    warning = None
    if mode in ("auto", "heartbeat"):
        sources.append(HeartbeatFiles(run_dir, owner))
    if mode in ("auto", "lighthouse"):
        if lighthouse is not None:
            sources.append(lighthouse)
        else:
            warning = "health.progress wants the Lighthouse, but its address is unknown: hangs are seen by heartbeat files only"
    return sources, warning


class HangCheck:
    def __init__(
        self,
        table: ProcessTable,
        sources: Sequence[ProgressSource],
        hang_timeout_s: float,
        startup_timeout_s: float,
        excused_since: Callable[[], float] | None = None,
        target_step: int | None = None,
        pace_rule: PaceRule | None = None,
        pace: ProgressPace | None = None,
    ) -> None:
        """`pace` holds what was learned: the caller keeps it across checks when it builds a new one each cycle."""
        self._table = table
        self._rule = pace_rule or PaceRule(hang_timeout_s)
        self.pace = pace if pace is not None else ProgressPace()
        self.target_step = target_step  # the caller lowers it when the owner's stop-at file does
        self._sources = list(sources)
        self._hang = hang_timeout_s
        self._startup = startup_timeout_s
        self._excused = excused_since

    def progress(self, g: GroupAttempt) -> Progress | None:
        found = [p for s in self._sources if (p := s.last_progress(g.group, g.attempt, g.started_at)) is not None]
        return max(found, key=lambda p: p.t) if found else None

    def observe(self, now: float) -> list[Hung]:
        if not self._sources:
            return []
        for s in self._sources:
            s.refresh(now)
        # The Lighthouse unreadable excuses every source: no torchft trainer can step without its Lighthouse.
        excuse = max(s.excused_until(now) for s in self._sources)
        if self._excused is not None:
            excuse = max(excuse, self._excused())
        out: list[Hung] = []
        attempts = group_attempts(self._table)
        found = [(g, self.progress(g)) for g in attempts]
        starts = [g.started_at for g in attempts]
        advanced = {g.group for g, p in found if p is not None}
        latest = [p.t for _, p in found if p is not None]
        for s in self._sources:
            groups, t = s.job_progress()
            advanced |= groups
            latest += [] if t is None else [t]
        job_last = max(latest, default=None)  # any group of the job
        for g, p in found:
            if p is not None:
                self.pace.saw(g.group, g.attempt, p.t, excused_until=excuse, starts=starts)
        for g, p in found:
            if p is None:
                last, limit, why = g.started_at, self._startup, f"startup_timeout_s {self._startup:g}"
            else:
                limit, why = hang_limit(self._rule, self.pace.longest_s)
                last = p.t
            target = self.target_step
            finishing = p is not None and p.step is not None and target is not None and p.step >= target - 1
            if finishing:
                limit = max(limit, self._hang, self._startup)
                why = f"startup_timeout_s, finishing {limit:g}"
            elif p is not None and len(advanced) >= 2 and job_last is not None and now - max(job_last, excuse) > limit:
                limit = max(limit, self._startup)
                why = (
                    f"startup_timeout_s {limit:g}: every group of the job silent at once "
                    f"({len(advanced)} groups), a cause they share"
                )
            silent = now - max(last, excuse)
            if silent > limit:
                out.append(
                    Hung(
                        group=g.group,
                        attempt=g.attempt,
                        pid=g.pid,
                        last_step=None if p is None else p.step,
                        silent_s=silent,
                        timeout_s=limit,
                        source=", ".join(s.name for s in self._sources),
                        started=p is not None,
                        finishing=finishing,
                        limit_why=why,
                    )
                )
        return out
