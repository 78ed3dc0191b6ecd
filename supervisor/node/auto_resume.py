"""Nodes come back: when a node lamplighter drained may be resumed without a person.

Only lamplighter's own drains (the reason starts with `lamplighter:`), never
an admin's or Slurm's. The node's checks (GPU, GPU count, links) must pass
at least `passes` times in a row, the first and the last at least `over_s`
apart (a pass counts only `over_s / passes` after the last counted one, so a
flapping link cannot collect its passes in one burst; a failure starts over). A node that lamplighter drains again within
`relapse_hold_s` of an automatic resume is held for a person: the drain stays,
and its reason says why.

`decide` is a pure function of (now, state, observation, config); the daemon
keeps the state in its state dir, so a restarted daemon neither forgets a
relapse nor counts passes twice.

Resumes are rate-limited like drains, with the drains' numbers (node.yaml
max_drain_fraction per drain_window_s), counted apart: at most that many
nodes resumed automatically per window across the cluster, so a check that
wrongly passes everywhere cannot put many broken nodes back at once. Slurm
keeps no record of a resume, so the daemon leaves one on the node: its
Comment says `lamplighter: resumed at <epoch>`, which every node's daemon
reads with the node list (again just before a resume, so a resume another
daemon did since the last shared read counts; two daemons that resume in the
same instant can still both pass). An admin's own Comment is never
overwritten; that node's resume is then known only to its own daemon. A
refused resume keeps its passes and is reported once per 5 minutes.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from lamplighter.configs.schema import AutoResumeConfig
from lamplighter.configs.slurm_names import REASON_PREFIX
from lamplighter.policy.ratelimit import may_resume

OWN_DRAIN_PREFIX = REASON_PREFIX.strip()
HELD_MARK = "held for a person"
STATE_KEY = "auto_resume"  # where the daemon keeps the state (DaemonState.policy)
RESUME_MARK = f"{REASON_PREFIX}resumed at "
_MARK = re.compile(re.escape(RESUME_MARK) + r"(\d{1,12})\b")


def resume_mark(now: float) -> str:
    """The node Comment an automatic resume leaves: the time, for every daemon's rate limit."""
    return f"{RESUME_MARK}{int(now)} ({time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now))})"


def marked_at(comment: str | None) -> float | None:
    """When the Comment says lamplighter resumed the node, or None (no Comment, or someone else's)."""
    m = _MARK.match(comment or "")
    return float(m.group(1)) if m else None


def may_mark(comment: str | None) -> bool:
    """Whether the resume may write its mark: the Comment is empty or lamplighter's own, never an admin's."""
    return not comment or comment == "(null)" or marked_at(comment) is not None


@dataclass(frozen=True)
class ResumeLimit:
    """The cluster's limit on automatic resumes: node.yaml's max_drain_fraction and drain_window_s."""

    max_fraction: float
    window_s: float


@dataclass(frozen=True)
class NodeView:
    """What Slurm says of this node now, and whether its checks passed this cycle."""

    drained: bool  # DRAIN or DRAINED (an admin's DOWN is not ours to touch)
    reason: str | None
    checks_ok: bool
    checks_said: str = ""  # the failing check's words, or a summary of the passing ones
    node: str = ""
    total_nodes: int = 0  # in the cluster (0: unknown, and no resume)
    resumes: tuple[tuple[float, str], ...] = ()  # (time, node) of automatic resumes: node Comments, this node's own


@dataclass(frozen=True)
class ResumeState:
    drained_at: float | None = None  # when this drain of ours was first seen
    passes: int = 0
    first_pass_at: float | None = None  # the current run of passes began here (a failure ends it)
    last_pass_at: float | None = None
    resumed_at: float | None = None  # our last automatic resume
    held: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ResumeState:
        fields = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in fields})


Action = Literal["none", "resume", "hold", "refused"]


@dataclass(frozen=True)
class ResumeDecision:
    action: Action
    reason: str
    state: ResumeState


def _ours(view: NodeView) -> bool:
    return view.drained and (view.reason or "").startswith(OWN_DRAIN_PREFIX)


def decide(now: float, state: ResumeState, view: NodeView, cfg: AutoResumeConfig, limit: ResumeLimit) -> ResumeDecision:
    if not cfg.enabled:
        return ResumeDecision("none", "auto-resume is off (node.yaml auto_resume.enabled)", state)
    if not _ours(view):
        # Not drained, or drained by someone else: nothing to count. The last resume is remembered (relapse).
        kept = ResumeState(resumed_at=state.resumed_at)
        why = "not drained" if not view.drained else f"drained by someone else ({(view.reason or '')[:80]!r})"
        return ResumeDecision("none", why, kept)
    if state.held or HELD_MARK in (view.reason or ""):
        return ResumeDecision(
            "none", "held for a person: resume it with `lamplighter nodes resume`", replace(state, held=True)
        )
    if state.drained_at is None:
        state = replace(state, drained_at=now, passes=0, first_pass_at=None, last_pass_at=None)
        if state.resumed_at is not None and now - state.resumed_at < cfg.relapse_hold_s:
            minutes = (now - state.resumed_at) / 60
            return ResumeDecision(
                "hold",
                f"{HELD_MARK}: drained again {minutes:.0f} min after lamplighter resumed it "
                f"(auto_resume.relapse_hold_s {cfg.relapse_hold_s:g})",
                replace(state, held=True),
            )
    if not view.checks_ok:
        return ResumeDecision(
            "none",
            f"checks fail: {view.checks_said[:120]}; passes start again",
            replace(state, passes=0, first_pass_at=None, last_pass_at=None),
        )
    gap = cfg.over_s / cfg.passes
    if state.last_pass_at is not None and now - state.last_pass_at < gap:
        return ResumeDecision("none", f"{state.passes}/{cfg.passes} passes; next counts after {gap:g} s", state)
    start = state.first_pass_at if state.first_pass_at is not None else now
    state = replace(state, passes=state.passes + 1, first_pass_at=start, last_pass_at=now)
    if state.passes < cfg.passes or now - start < cfg.over_s:
        return ResumeDecision("none", f"{state.passes}/{cfg.passes} passes over {cfg.over_s:g} s", state)
    allowed, why = may_resume(now, view.resumes, view.total_nodes, limit.max_fraction, limit.window_s, view.node)
    if not allowed:
        # The passes are kept: the node is resumed at the first look the limit allows.
        return ResumeDecision("refused", f"checks passed {state.passes} times, resume refused: {why}", state)
    return ResumeDecision(
        "resume",
        f"lamplighter: checks passed {state.passes} times over {(now - start) / 60:.0f} min "
        f"({view.checks_said[:80]}); was: {(view.reason or '')[:120]}",
        ResumeState(resumed_at=now),
    )
