"""report.json and timeline.png of a Slurm run, the same shape `lamplighter local` writes.

Inputs: the groups' step logs, `<run_dir>/chaos.jsonl` (each injection and
what was seen of its recovery from outside) and, when given, the node daemons'
action logs (one JSON line per action: ts, node, action, target, reason).

Per fault:
  t_detected   the first daemon action after the injection that concerns the
               fault's node or Slurm job; without action logs, the moment Slurm
               counted a restart of the group's job (an upper bound: detection
               plus the requeue) or, for the Lighthouse, its new listener.
  t_restarted  the group's job RUNNING again (node_after: where), or its
               trainer started again inside the allocation by the job's in-job
               agent (in_job, how: warm from the spare or cold), or the
               Lighthouse listening again, or the daemon back.
The rest (first commit after, survivor stall, steps lost, identical weights,
goodput) is `lamplighter.report.build.build_report`, unchanged; the
target it judges is the submission's trainer.steps, or the step the run
directory's `stop-at` names when that is smaller (rundir/stop_at.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lamplighter.chaos.plan import UNTARGETED_KINDS
from lamplighter.lighthouse.steplog import read_lighthouse_steps
from lamplighter.report.build import build_report
from lamplighter.report.fault_journal import FaultRecord
from lamplighter.rundir.action_history import job_refs
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import StepRecord, read_steps
from lamplighter.rundir.stop_at import read_stop_at
from lamplighter.slurm.chaos.inject import CHAOS_FILE, read_records
from lamplighter.slurm.submit.submission import Submission

REPORT_FILE = "report.json"
TIMELINE_FILE = "timeline.png"


def read_action_logs(paths: Iterable[Path]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in paths:
        out += [r for r in read_records(p) if isinstance(r.get("ts"), (int, float))]
    return sorted(out, key=lambda r: r["ts"])


def concerns(action: dict[str, Any], inj: dict[str, Any]) -> bool:
    """Whether a daemon action is about an injected fault: its Slurm job by exact id, or its node.

    Matched field by field, not as text: job 1 must not match `"attempt": 1`."""
    if inj.get("job_id") is not None and str(inj["job_id"]) in {j for j, _, _ in job_refs(action)}:
        return True
    seen = action.get("observation")
    obs: dict[str, Any] = seen if isinstance(seen, dict) else {}
    node = inj.get("node")
    return bool(node) and node in (action.get("node"), action.get("target"), obs.get("node"))


def detection_time(
    inj: dict[str, Any], rec: dict[str, Any] | None, actions: list[dict[str, Any]]
) -> tuple[float | None, str]:
    """When (and as what) the fault was noticed: a daemon action, else what Slurm showed."""
    t0 = inj["t"]
    end = (rec or {}).get("t_first_commit") or float("inf")
    for a in actions:
        if t0 <= a["ts"] <= end and concerns(a, inj):
            return a["ts"], f"{a.get('node')}: {a.get('action')} {a.get('target')} ({a.get('reason')})"
    if rec is None:
        return None, ""
    if rec.get("t_requeued"):
        return rec["t_requeued"], "slurm: job restarted"
    if rec.get("t_running"):
        return rec["t_running"], f"in-job restart ({rec.get('how')})" if rec.get("in_job") else "restarted"
    return None, ""


def pair_chaos(records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    recovered = {r["of_t"]: r for r in records if r.get("event") == "recovered"}
    return [(r, recovered.get(r["t"])) for r in records if r.get("event") == "injected"]


def faults_from_chaos(
    records: list[dict[str, Any]], actions: list[dict[str, Any]], t_start: float
) -> tuple[list[FaultRecord], list[dict[str, Any]]]:
    faults: list[FaultRecord] = []
    extras: list[dict[str, Any]] = []
    for inj, rec in pair_chaos(records):
        t_det, how = detection_time(inj, rec, actions)
        # Lighthouse and supervisor faults hit no one group: the report measures every group around them.
        group = inj["group"] if inj["kind"] not in (*UNTARGETED_KINDS, "supervisor-kill") else None
        faults.append(
            FaultRecord(
                kind=inj["kind"],
                group=group,
                planned_at_s=round(inj["t"] - t_start, 3),
                t_injected=inj["t"],
                attempt=int(inj.get("attempt_before", inj.get("restarts_before")) or 0),
                t_detected=t_det,
                t_restarted=(rec or {}).get("t_running"),
                detected_as=how,
            )
        )
        r = rec or {}
        node_after = r.get("node_after")
        t_running = r.get("t_running")
        extras.append(
            {
                "node": inj.get("node"),
                "target_group": inj["group"],
                "slurm_job_id": inj.get("job_id"),
                "node_after": node_after[0] if isinstance(node_after, list) and node_after else node_after,
                "t_requeued": r.get("t_requeued"),
                "running_again_s": None if t_running is None else round(t_running - inj["t"], 3),
                "restarts_after": r.get("restarts_after"),
                "in_job": r.get("in_job"),
                "how": r.get("how"),
            }
        )
    return faults, extras


def steps_by_group(sub: Submission) -> dict[int, list[StepRecord]]:
    """The trainers' own step logs; for a trainer that keeps none, the steps its Lighthouse job recorded."""
    own = _own_steps(sub)
    if any(own.values()):
        return own
    return read_lighthouse_steps(RunPaths(Path(sub.run_dir)).lighthouse_steps(), sorted(sub.groups))


def _own_steps(sub: Submission) -> dict[int, list[StepRecord]]:
    paths = RunPaths(Path(sub.run_dir))
    return {g: read_steps(paths.steps(g)) for g in sorted(sub.groups)}


def write_report(
    sub: Submission,
    *,
    action_logs: Iterable[Path] = (),
    out_dir: Path | None = None,
    t_end: float | None = None,
    extra: dict[str, Any] | None = None,
    timeline: bool = True,
) -> dict[str, Any]:
    """Build, write and return report.json (and timeline.png) under out_dir (default: the run dir)."""
    out = out_dir or Path(sub.run_dir)
    by_group = steps_by_group(sub)
    records = read_records(Path(sub.run_dir) / CHAOS_FILE)
    actions = read_action_logs(action_logs)
    first = [r.t for recs in by_group.values() for r in recs]
    faults, extras = faults_from_chaos(records, actions, min(first) if first else sub.submitted_at)
    end = t_end if t_end is not None else time.time()
    report = build_report(
        by_group,
        faults,
        target_steps=sub.target_steps,
        t_start=sub.submitted_at,
        t_end=end,
        stop_at=read_stop_at(Path(sub.run_dir)),
        extra={
            "job": sub.job,
            "mode": "slurm",
            "t_training_started": min(first) if first else None,
            "slurm_jobs": {str(g): j for g, j in sub.groups.items()},
            "lighthouse_job_id": sub.lighthouse_job_id,
            **(extra or {}),
        },
    )
    for row, ex in zip(report["faults"], extras, strict=True):
        row.update(ex)
    out.mkdir(parents=True, exist_ok=True)
    if timeline and by_group:
        from lamplighter.report.timeline import plot_timeline

        plot_timeline(by_group, report, out / TIMELINE_FILE)
        report["timeline"] = str(out / TIMELINE_FILE)
    (out / REPORT_FILE).write_text(json.dumps(report, indent=2))
    return report
