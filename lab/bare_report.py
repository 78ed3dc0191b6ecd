"""report.json and timeline.png of a bare-metal run, the same shape `lamplighter local` and Slurm runs write.

Inputs: the groups' step logs, the faults the harness injected (kind, group,
host, t) and the host daemons' action lines in `<run_dir>/actions.jsonl`
(host_daemon.py: ts, node, action, job, group, epoch, reason). Per fault:

  t_detected   the first action after the injection about the fault's group
               (its trainer ended, was killed, or the group was moved) or its
               host (taken out)
  t_restarted  the group's next trainer start after that, on any host
  placer_moved_s (host-crash)  until another daemon held the placer role
  fenced (partition)  the cut-off host killed the group's trainer before the
               group started elsewhere, and that trainer's epoch committed no
               step after the new start

The rest (first commit after, survivors' stall, steps lost, identical weights)
is `lamplighter.report.build.build_report`, unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lamplighter.report.build import build_report, run_ok
from lamplighter.report.fault_journal import FaultRecord
from lamplighter.rundir.actions import ACTIONS_FILE
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import StepRecord, read_steps
from lamplighter.rundir.stop_at import read_stop_at
from lamplighter.slurm.chaos.inject import read_records

DETECTING = ("ended", "kill", "move", "out")


def detection(fault: dict[str, Any], actions: list[dict[str, Any]]) -> dict[str, Any] | None:
    for a in actions:
        if a["ts"] < fault["t"] or a.get("action") not in DETECTING:
            continue
        if a.get("group") == fault["group"] or (a.get("action") == "out" and a.get("node") == fault["host"]):
            return a
    return None


def first(actions: list[dict[str, Any]], after: float, **match: Any) -> dict[str, Any] | None:
    return next((a for a in actions if a["ts"] >= after and all(a.get(k) == v for k, v in match.items())), None)


def fencing(fault: dict[str, Any], actions: list[dict[str, Any]], steps: list[StepRecord]) -> dict[str, Any]:
    """Whether a cut-off host's trainer was fenced: killed there before the group started elsewhere, and its
    epoch committed nothing after that start."""
    kill = next(
        (
            a
            for a in actions
            if a["ts"] >= fault["t"]
            and a.get("action") == "kill"
            and a.get("node") == fault["host"]
            and a.get("group") == fault["group"]
            and "fencing" in str(a.get("reason"))
        ),
        None,
    )
    start = first(actions, fault["t"], action="start", group=fault["group"], epoch=fault.get("epoch_after"))
    stale = (
        [r.step for r in steps if r.committed and r.attempt == fault["epoch"] and r.t > start["ts"]] if start else []
    )
    ok = kill is not None and start is not None and kill["ts"] < start["ts"] and not stale
    return {
        "t_fence_kill": kill["ts"] if kill else None,
        "t_started_elsewhere": start["ts"] if start else None,
        "fence_before_start_s": round(start["ts"] - kill["ts"], 3) if kill and start else None,
        "stale_commits": stale,
        "fenced": ok,
    }


def build_bare_report(
    run_dir: Path,
    injected: list[dict[str, Any]],
    *,
    target_steps: int,
    t_start: float,
    t_end: float,
    out_dir: Path,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    paths = RunPaths(run_dir)
    groups = sorted({0, 1, 2} | {int(f["group"]) for f in injected})
    by_group = {g: read_steps(paths.steps(g)) for g in groups}
    actions = sorted(
        (r for r in read_records(run_dir / ACTIONS_FILE) if isinstance(r.get("ts"), (int, float))),
        key=lambda r: r["ts"],
    )
    first_step = min((r.t for recs in by_group.values() for r in recs), default=t_start)
    faults, extras = [], []
    for f in injected:
        det = detection(f, actions)
        start = first(actions, det["ts"], action="start", group=f["group"]) if det else None
        faults.append(
            FaultRecord(
                kind=f["kind"],
                group=f["group"],
                planned_at_s=round(f["t"] - first_step, 3),
                t_injected=f["t"],
                attempt=int(f["epoch"]),
                t_detected=det["ts"] if det else None,
                t_restarted=start["ts"] if start else None,
                detected_as=f"{det['node']}: {det['action']} ({det['reason']})" if det else "",
            )
        )
        ex: dict[str, Any] = {"host": f["host"], "host_after": f.get("host_after"), "epoch_after": f.get("epoch_after")}
        if start:
            ex["started_on"] = start["node"]
        if f["kind"] == "host-crash":
            ex["placer_before"], ex["placer_after"] = f.get("placer_before"), f.get("placer_after")
            ex["placer_moved_s"] = round(f["t_placer_moved"] - f["t"], 3) if f.get("t_placer_moved") else None
        if f["kind"] == "partition":
            ex.update(fencing(f, actions, by_group[f["group"]]))
        extras.append(ex)
    report = build_report(
        by_group,
        faults,
        target_steps=target_steps,
        t_start=t_start,
        t_end=t_end,
        stop_at=read_stop_at(run_dir),
        extra={"mode": "bare-metal", "t_training_started": first_step, **(extra or {})},
    )
    for row, ex in zip(report["faults"], extras, strict=True):
        row.update(ex)
    ttl = (extra or {}).get("lease_ttl_s")
    checks = {
        "run_ok": run_ok(report),
        "every_fault_back": all(r.get("t_first_commit_after") for r in report["faults"]),
        "partition_fenced": all(r["fenced"] for r in report["faults"] if r["kind"] == "partition"),
        # The role moves once the dead placer's lease (its TTL) runs out, at the next daemon's poll.
        "placer_moved_within_lease": all(
            r["placer_moved_s"] is not None and (ttl is None or r["placer_moved_s"] <= ttl + 1.0)
            for r in report["faults"]
            if r["kind"] == "host-crash" and r.get("placer_before") == r["host"]
        ),
    }
    report["checks"] = checks
    report["ok"] = all(checks.values())
    out_dir.mkdir(parents=True, exist_ok=True)
    if any(by_group.values()):
        from lamplighter.report.timeline import plot_timeline

        plot_timeline(by_group, report, out_dir / "timeline.png")
        report["timeline"] = str(out_dir / "timeline.png")
    (out_dir / "report.json").write_text(json.dumps(report, indent=2))
    return report


def per_fault_lines(report: dict[str, Any]) -> list[str]:
    out = []
    for r in report["faults"]:
        det = r.get("detection_latency_s")
        back = r.get("recovery_s")
        line = (
            f"{r['kind']:<11} group {r['group']} on {r['host']} -> {r.get('host_after')}: detected after "
            f"{'-' if det is None else f'{det:.2f} s'}, first commit {'-' if back is None else f'{back:.2f} s'} after "
            f"the fault, survivors' stall {r.get('survivor_stall_s')}"
        )
        if r["kind"] == "host-crash":
            line += f"; placer {r.get('placer_before')} -> {r.get('placer_after')} in {r.get('placer_moved_s')} s"
        if r["kind"] == "partition":
            line += f"; fenced {r['fenced']} ({r.get('fence_before_start_s')} s before the new start)"
        out.append(line)
    return out
