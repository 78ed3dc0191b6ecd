"""A job's history from the daemons' action lines: per group and attempt, what was done, where, why, on what evidence.

Pure: lines in, a history out, and a text rendering of it. The lines are the
ones rundir/actions.py formats (one JSON object each); a line names the groups it
concerns in `jobs` ([{"job_id", "group", "attempt"}]); a line without it (the
in-job agent's, a node's own drain) is placed by its target and `attempt`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NO_ATTEMPT = -1  # an action whose line does not say which attempt


@dataclass
class GroupHistory:
    group: str
    job_ids: set[str] = field(default_factory=set)
    attempts: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


@dataclass
class History:
    groups: dict[str, GroupHistory] = field(default_factory=dict)
    unreadable: int = 0  # lines that are not action records

    def to_json(self) -> dict[str, Any]:
        return {
            "groups": [
                {
                    "group": g.group,
                    "job_ids": sorted(g.job_ids),
                    "attempts": [
                        {"attempt": None if n == NO_ATTEMPT else n, "actions": acts}
                        for n, acts in sorted(g.attempts.items())
                    ],
                }
                for g in sorted(self.groups.values(), key=lambda g: g.group)
            ],
            "unreadable_lines": self.unreadable,
        }


def parse_lines(lines: Iterable[str]) -> tuple[list[dict[str, Any]], int]:
    """The action records among the lines, and how many lines were not one (torn, foreign, empty ones skipped)."""
    out, bad = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if not isinstance(rec, dict) or not {"ts", "node", "action", "target"} <= rec.keys():
            bad += 1
            continue
        out.append(rec)
    return out, bad


def job_refs(rec: Mapping[str, Any]) -> list[tuple[str, str | None, int]]:
    """(Slurm job id, group, attempt) of each job an action line is about: its jobs list, else its target."""
    refs = []
    for j in rec.get("jobs") or []:
        if isinstance(j, dict) and j.get("job_id") is not None:
            attempt = j.get("attempt")
            refs.append((str(j["job_id"]), j.get("group"), NO_ATTEMPT if attempt is None else int(attempt)))
    if refs:
        return refs
    raw = rec.get("observation")
    obs: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    attempt = rec.get("attempt", obs.get("attempt"))
    return [(str(rec["target"]), rec.get("group"), NO_ATTEMPT if attempt is None else int(attempt))]


def history(records: Iterable[Mapping[str, Any]], job_ids: Mapping[str, str], job_name: str | None = None) -> History:
    """Each action under every group of this job it concerns, in time order, duplicates (the same line read
    from two logs) once.

    job_ids: Slurm job id -> group name, for the job's groups as submitted (may be empty); job_name: a group
    of this job is named "<job_name>/g<n>". A line about no group of this job is left out.
    """
    out = History()
    seen: set[tuple[Any, ...]] = set()
    for rec in sorted(records, key=lambda r: float(r["ts"])):
        key = (rec["ts"], rec["node"], rec["action"], rec["target"], rec.get("id"))
        if key in seen:
            continue
        seen.add(key)
        for job_id, group, attempt in job_refs(rec):
            name = job_ids.get(job_id) or group
            ours = job_id in job_ids or (
                job_name is not None and group is not None and group.startswith(job_name + "/")
            )
            if not ours or name is None:
                continue
            g = out.groups.setdefault(name, GroupHistory(name))
            g.job_ids.add(job_id)
            g.attempts.setdefault(attempt, []).append(dict(rec))
    return out


def _evidence(obs: Any) -> str:
    """The observation behind an action, in one line."""
    if not isinstance(obs, dict):
        return json.dumps(obs, default=str)
    if obs.get("type") == "gpu" and isinstance(obs.get("faults"), list):
        text = "; ".join(f"GPU {f.get('gpu')} {f.get('status')} {f.get('kind')}" for f in obs["faults"])
        return text + (f"; VM faults (time, job) {obs['vm_faults']}" if obs.get("vm_faults") else "")
    shown = {k: v for k, v in obs.items() if k not in ("reason", "rate_limit", "gpu_faults")}
    return json.dumps(shown, default=str, separators=(",", ":"))


def render(h: History, title: str) -> str:
    """The history as text: one block per group, one per attempt, one entry per action."""
    if not h.groups:
        return (
            f"{title}: no daemon action recorded: no group of it was killed, requeued or given up on, "
            "and no node was drained under it, by a lamplighter daemon."
        )
    lines = [title]
    for g in sorted(h.groups.values(), key=lambda g: g.group):
        ids = sorted(g.job_ids)
        slurm = all(i.replace("_", "").isdigit() for i in ids)  # a bare-metal line names no Slurm job
        lines.append(f"group {g.group} ({'Slurm job ' if slurm else ''}{', '.join(ids)})")
        for n, acts in sorted(g.attempts.items()):
            lines.append("  attempt ?" if n == NO_ATTEMPT else f"  attempt {n}")
            for a in acts:
                outcome = a.get("outcome", "")
                when = str(a.get("time") or a["ts"])
                lines.append(f"    {when}  {a['node']}  {a['action']} {a['target']}  [{outcome}]")
                lines.append(f"      why: {a.get('reason', '')}")
                lines.append(f"      seen: {_evidence(a.get('observation'))}")
                if a.get("result", {}).get("error"):
                    lines.append(f"      error: {a['result']['error']}")
    return "\n".join(lines)
