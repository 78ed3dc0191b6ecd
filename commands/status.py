"""`lamplighter status JOB`: one picture of a Slurm job, from Slurm, the Lighthouse and the run directory.

Per group: Slurm job id and state, nodes, restarts, last committed step, last
fault and its reason (the latest chaos injection, else Slurm's reason for a
pending job). The quorum from the Lighthouse's /status page. Drained and down
nodes with their reasons and ages, marked when lamplighter took them out. The
health each node daemon of the job's nodes last published (health_report.py).
Overall committed steps per second over the last minute. `collect` does the
I/O; `build_status` and `format_table` are pure.

A job Slurm has forgotten (MinJobAge passed) is GONE; when Slurm does not
answer, its jobs are UNKNOWN and `slurm_error` says why: never GONE.

`status` asks `scontrol show job` of each job once (the whole record: the
reason of a pending job too). `status --watch` asks on every refresh, so each
refresh reads the jobs the cheap way (`read_jobs`): from the head's job table
in the cluster status folder when it is there and fresh (slurm/head_table.py),
and whatever the table lacks in ONE `squeue -j` for all of them (its reasons
are then not shown), never one call per group.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from lamplighter.lighthouse.status import LighthouseStatus, LighthouseStatusError, fetch_status
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import StepRecord, parse_step
from lamplighter.rundir.stop_at import final_target, read_stop_at
from lamplighter.slurm.actions import SlurmApi
from lamplighter.slurm.chaos.inject import CHAOS_FILE, read_records
from lamplighter.slurm.drained_nodes import format_age, out_of_service
from lamplighter.slurm.head_table import JobTable
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.parsers import JobInfo, NodeInfo
from lamplighter.slurm.run import SlurmError
from lamplighter.slurm.submit.lighthouse_log import lighthouse_log_problem
from lamplighter.slurm.submit.submission import INCOMPLETE, Submission, slurm_forgot
from lamplighter.supervisor.health_report import ENV_CLUSTER_STATUS_DIR, NodeReport, read_reports

RATE_WINDOW_S = 60.0
TAIL_BYTES = 256 * 1024


def tail_steps(path: Path, max_bytes: int = TAIL_BYTES) -> list[StepRecord]:
    """The step records in the last `max_bytes` of a step log (status needs only recent ones)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read().decode(errors="replace")
    except FileNotFoundError:
        return []
    lines = data.splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line is cut
    return [r for r in (parse_step(line) for line in lines) if r is not None]


def steps_per_s(records: list[StepRecord], now: float, window: float = RATE_WINDOW_S) -> float | None:
    """Committed steps of the job per second over the last `window` seconds (max step advance / time)."""
    recent = sorted((r for r in records if r.committed and r.t >= now - window), key=lambda r: r.t)
    if len(recent) < 2 or recent[-1].t <= recent[0].t:
        return None
    return round((recent[-1].step - recent[0].step) / (recent[-1].t - recent[0].t), 3)


GONE = "GONE"  # Slurm forgot the job
UNKNOWN = "UNKNOWN"  # Slurm did not answer


def _state(jid: int, jobs: dict[int, JobInfo | None]) -> str:
    if jid not in jobs:
        return UNKNOWN
    info = jobs[jid]
    return GONE if info is None else info.state


def build_status(
    sub: Submission,
    jobs: dict[int, JobInfo | None],
    nodes: list[NodeInfo],
    steps: dict[int, list[StepRecord]],
    chaos: list[dict[str, Any]],
    quorum: LighthouseStatus | None,
    quorum_error: str | None,
    now: float,
    slurm_error: str | None = None,
    daemons: dict[str, NodeReport] | None = None,
    jobs_from: str | None = None,
) -> dict[str, Any]:
    """jobs: every job Slurm answered for (None: it forgot the job); one it did not answer for is absent.

    daemons: the node daemons' published health by node; None when no cluster status folder is known.
    jobs_from: where the job states were read (read_jobs), shown under the table; None: scontrol per job.
    """
    groups: dict[str, Any] = {}
    job_nodes: set[str] = set()
    for g, jid in sorted(sub.groups.items()):
        info = jobs.get(jid)
        if info is not None and info.state in ("RUNNING", "COMPLETING", "CONFIGURING"):
            job_nodes.update(expand_hostlist(info.node_list))
        committed = [r for r in steps.get(g, []) if r.committed]
        last = max(committed, key=lambda r: r.step, default=None)
        faults = [c for c in chaos if c.get("event") == "injected" and c.get("group") == g]
        last_fault = faults[-1] if faults else None
        groups[str(g)] = {
            "job_id": jid,
            "state": _state(jid, jobs),
            "nodes": info.node_list if info else None,
            "restarts": info.restarts if info else None,
            "slurm_reason": info.reason if info else None,
            "step": last.step if last else 0,
            "step_age_s": round(now - last.t, 1) if last else None,
            "attempt": last.attempt if last else None,
            "last_fault": None
            if last_fault is None
            else {
                "kind": last_fault["kind"],
                "t": last_fault["t"],
                "node": last_fault.get("node"),
                "reason": f"chaos {last_fault['kind']} on {last_fault.get('node') or '-'}",
            },
        }
    all_steps = [r for recs in steps.values() for r in recs]
    out: dict[str, Any] = {
        "job": sub.job,
        "run_dir": sub.run_dir,
        "target_steps": final_target(sub.target_steps, read_stop_at(Path(sub.run_dir))),
        "step": max((r.step for r in all_steps if r.committed), default=0),
        "steps_per_s": steps_per_s(all_steps, now),
        "groups": groups,
        "lighthouse": {
            "address": sub.address(),
            "job_id": sub.lighthouse_job_id,
            "state": None if sub.lighthouse_job_id is None else _state(sub.lighthouse_job_id, jobs),
        },
        "quorum": None
        if quorum is None
        else {
            "quorum_id": quorum.quorum_id,
            "members": [asdict(m) | {"group": m.group} for m in quorum.members],
            "live_groups": sorted(quorum.live_groups()),
            "max_step": quorum.max_step(),
        },
        "quorum_error": quorum_error,
        "nodes_out": [o.to_json() for o in out_of_service(nodes, now)],
        "daemons": None
        if daemons is None
        else {
            n: (daemons[n].to_json() if n in daemons else {"node": n, "health": "missing", "age_s": None})
            for n in sorted(job_nodes | {n for n, r in daemons.items() if set(r.report.get("jobs") or []) & {sub.job}})
        },
        "slurm_error": slurm_error,
        "jobs_from": jobs_from,
        "incomplete": sub.extra.get(INCOMPLETE),
        "faults_injected": sum(1 for c in chaos if c.get("event") == "injected"),
        "t": now,
    }
    return out


# How old a head's job table `status --watch` still takes: the node daemons' bound at the head's default pace
# (supervisor/job_table.py table_max_age_s at slurm_poll_s 5). An older one is not used: one squeue instead.
TABLE_MAX_AGE_S = 15.0


def read_jobs(
    sub: Submission, api: SlurmApi, table: JobTable | None
) -> tuple[dict[int, JobInfo | None], str | None, str]:
    """The job's Slurm jobs, cheaply: the head's fresh table for what it holds, ONE squeue for the rest.

    Returns (jobs as build_status takes them, Slurm's error or None, where they were read). A job neither
    the table nor squeue knows is GONE (squeue --states=all shows every job Slurm remembers)."""
    ids = sub.all_job_ids()
    jobs: dict[int, JobInfo | None] = {}
    got = table.lookup(ids) if table is not None else None
    if got is None:
        lacking, source = set(ids), "one squeue"
    else:
        found, lacking = got
        jobs.update(found)
        age = f"{table.last_age_s:.0f} s old" if table is not None and table.last_age_s is not None else "fresh"
        source = f"the head's job table ({age})" + (" and one squeue" if lacking else "")
    if not lacking:
        return jobs, None, source
    try:
        known = api.jobs_by_id(lacking)
    except SlurmError as e:
        if not slurm_forgot(e):  # squeue (22.05) fails only when it knows none of them: all purged, or no answer
            return jobs, str(e), source
        known = {}
    jobs.update({j: known.get(j) for j in lacking})
    return jobs, None, source


def collect(
    sub: Submission,
    api: SlurmApi,
    now: float,
    lighthouse_timeout: float = 2.0,
    cluster_status_dir: Path | None = None,
    batched: bool = False,
    table: JobTable | None = None,
) -> dict[str, Any]:
    """batched (status --watch): the job states through read_jobs (`table`, default the cluster status folder's,
    then one squeue); else one `scontrol show job` each."""
    jobs: dict[int, JobInfo | None] = {}
    slurm_error: str | None = None
    jobs_from: str | None = None
    if batched:
        if table is None and cluster_status_dir is not None:
            table = JobTable(cluster_status_dir, TABLE_MAX_AGE_S)
        jobs, slurm_error, jobs_from = read_jobs(sub, api, table)
    for jid in [] if batched else sub.all_job_ids():
        try:
            jobs[jid] = api.job(jid)
        except SlurmError as e:
            if slurm_forgot(e):
                jobs[jid] = None  # MinJobAge passed
            else:
                slurm_error = str(e)
    try:
        nodes = api.nodes()
    except SlurmError as e:
        nodes, slurm_error = [], slurm_error or str(e)
    daemons = read_reports(cluster_status_dir, now) if cluster_status_dir is not None else None
    paths = RunPaths(Path(sub.run_dir))
    steps = {g: tail_steps(paths.steps(g)) for g in sub.groups}
    quorum: LighthouseStatus | None = None
    err: str | None = None
    address = sub.address()
    try:
        if not address:
            raise LighthouseStatusError("no address published yet")
        quorum = fetch_status(address, timeout=lighthouse_timeout)
    except (LighthouseStatusError, OSError) as e:
        err = str(e)
        # A Lighthouse that cannot start says why in its job's log (an import error): name it.
        problem = (
            None if sub.lighthouse_job_id is None else lighthouse_log_problem(Path(sub.run_dir), sub.lighthouse_job_id)
        )
        if problem is not None:
            err = f"{err}; {problem}"
    chaos = read_records(Path(sub.run_dir) / CHAOS_FILE)
    return build_status(sub, jobs, nodes, steps, chaos, quorum, err, now, slurm_error, daemons, jobs_from)


def format_table(st: dict[str, Any]) -> str:
    rate = st["steps_per_s"]
    lines = []
    if st.get("slurm_error"):
        lines.append(f"SLURM DID NOT ANSWER: job and node states are unknown: {st['slurm_error']}")
    if st.get("incomplete"):
        lines.append(f"SUBMISSION INCOMPLETE: {st['incomplete']}")
    lines += [
        f"job {st['job']}: step {st['step']}/{st['target_steps']}   "
        f"{'-' if rate is None else f'{rate:.2f}'} steps/s   run dir {st['run_dir']}",
        f"{'group':<6}{'job':>7}  {'state':<12}{'nodes':<10}{'restarts':>8}{'step':>7}{'age':>7}  last fault",
    ]
    for g, r in st["groups"].items():
        fault = r["last_fault"]["reason"] if r["last_fault"] else (r["slurm_reason"] or "-")
        age = "-" if r["step_age_s"] is None else f"{r['step_age_s']:.0f}s"
        lines.append(
            f"{g:<6}{r['job_id']:>7}  {r['state']:<12}{(r['nodes'] or '-'):<10}"
            f"{'-' if r['restarts'] is None else r['restarts']:>8}{r['step']:>7}{age:>7}  {fault}"
        )
    lh = st["lighthouse"]
    where = (
        f"job {lh['job_id']} {lh['state']}" if lh["job_id"] is not None else "no Slurm job (a fixed lighthouse.host)"
    )
    lines.append(f"lighthouse {lh['address'] or '(no address published)'} ({where})")
    q = st["quorum"]
    if q is None:
        lines.append(f"  quorum: unavailable ({st['quorum_error']})")
    else:
        members = (
            ", ".join(f"{m['group']}@{m['step']}{' (recovering)' if m['recovering'] else ''}" for m in q["members"])
            or "none"
        )
        lines.append(f"  quorum {q['quorum_id']}: {members}; live groups {', '.join(q['live_groups']) or 'none'}")
    if st.get("slurm_error"):
        lines.append("nodes out of service: unknown (Slurm did not answer)")
    elif st["nodes_out"]:
        lines.append("nodes out of service (* taken out by lamplighter):")
        lines += [
            f"  {n['node']:<8}{'*' if n['by_lamplighter'] else ' '} {n['state']:<18}{format_age(n['age_s']):>6}  "
            f"{n['reason'] or ''}"
            for n in st["nodes_out"]
        ]
    else:
        lines.append("nodes out of service: none")
    if st.get("jobs_from"):
        lines.append(f"job states from {st['jobs_from']}")
    daemons = st.get("daemons")
    if daemons is None:
        lines.append(f"node daemons: not shown (give --cluster-status-dir or set ${ENV_CLUSTER_STATUS_DIR})")
    elif not daemons:
        lines.append("node daemons: no node runs a group now")
    else:
        lines.append("node daemons of the job's nodes:")
        for n, d in daemons.items():
            if d["health"] == "missing":
                lines.append(f"  {n:<8}missing: no health report (is lamplighter supervise running there?)")
                continue
            problems = "; ".join(d.get("problems") or [])
            lines.append(
                f"  {n:<8}{d['health']:<15} reported {d['age_s']:.0f}s ago, {d.get('trainers', 0)} trainer(s)"
                + (f": {problems}" if problems else "")
            )
    return "\n".join(lines)
