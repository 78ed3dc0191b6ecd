"""Each node daemon's health, published as one small JSON file per node in a shared folder.

The status socket answers only on its own node; `lamplighter status` and
`lamplighter nodes` run on a login node. So a daemon whose node config sets
`cluster_status_dir` (a folder shared by every node and the login nodes,
writable by the daemons, readable by users) writes `<dir>/<node>.json`:
at once when its health changes, and at least every REFRESH_S seconds, so a
reader can tell a silent daemon (a stale report) from a healthy one.

    HealthPublisher(Path(dir), "n2").publish(now, summarize(status_doc, now))   # the daemon, every cycle
    read_reports(Path(dir), now) -> [NodeReport]                                 # the CLI

Health words: ok; gpu-fault (a GPU faulty or unresponsive); gpu-unknown (a
GPU's health could not be read: the reason says why, e.g. amdsmi missing);
and, from the reader, stale (no report for STALE_AFTER_S) or missing.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lamplighter.rundir.contract import write_json_atomic

log = logging.getLogger(__name__)

ENV_CLUSTER_STATUS_DIR = "LAMPLIGHTER_CLUSTER_STATUS_DIR"  # where the CLI looks when not given --cluster-status-dir
REFRESH_S = 10.0
STALE_AFTER_S = 3 * REFRESH_S
FILE_MODE = 0o644
_NODE = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_SUMMARY_KEYS = ("health", "problems", "gpus", "trainers", "jobs", "role")


def summarize(status: dict[str, Any], now: float) -> dict[str, Any]:
    """The published summary of a daemon's status document (status_socket's, see commands/supervise.py)."""
    gpus = status.get("gpus") or []
    by_status: dict[str, int] = {}
    for g in gpus:
        by_status[g["status"]] = by_status.get(g["status"], 0) + 1
    problems = [g["reason"] for g in gpus if g["status"] != "ok"]
    health = "ok"
    if any(g["status"] in ("fault", "unresponsive") for g in gpus):
        health = "gpu-fault"
    elif problems:
        health = "gpu-unknown"
    trainers = status.get("trainers") or []
    # A job supervised with the fallback (supervisor/node/job_settings.py): `lamplighter status` shows it on this node's line.
    problems += [
        f"job {j.get('job')}: settings not applied ({j['config_error']}): its hangs are reported, not acted on"
        for j in status.get("jobs") or []
        if isinstance(j, dict) and j.get("config_error")
    ]
    problems += [
        f"job {j.get('job')}: Lighthouse status unreadable: hang check off for this job"
        for j in status.get("jobs") or []
        if isinstance(j, dict) and j.get("lighthouse_unreadable")
    ]
    return {
        "node": status.get("node"),
        "role": status.get("role"),
        "pid": status.get("pid"),
        "t": now,
        "cycles": status.get("cycles"),
        "health": health,
        "problems": problems[:8],
        "gpus": by_status,
        "trainers": len(trainers),
        "jobs": sorted({str(t.get("job")) for t in trainers}),
    }


class HealthPublisher:
    """Writes one node's report; a failure to write is logged (rate-limited), never raised."""

    def __init__(self, folder: Path, node: str, refresh_s: float = REFRESH_S) -> None:
        if not _NODE.fullmatch(node):
            raise ValueError(f"{node!r} cannot name a health report file")
        self.path = folder / f"{node}.json"
        self.refresh_s = refresh_s
        self._last: dict[str, Any] | None = None
        self._last_t = float("-inf")
        self._last_error_t = float("-inf")

    def publish(self, now: float, summary: dict[str, Any]) -> bool:
        """Write if the health changed or the last report is REFRESH_S old; True if written."""
        same = self._last is not None and all(self._last.get(k) == summary.get(k) for k in _SUMMARY_KEYS)
        if same and now - self._last_t < self.refresh_s:
            return False
        try:
            write_json_atomic(self.path, summary, mode=FILE_MODE)
        except OSError as e:
            if now - self._last_error_t > 60:
                log.warning("cannot publish this node's health to %s: %s", self.path, e)
                self._last_error_t = now
            return False
        self._last, self._last_t = summary, now
        return True


@dataclass(frozen=True)
class NodeReport:
    node: str
    health: str  # the daemon's word, or stale
    age_s: float
    report: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "health": self.health, "age_s": round(self.age_s, 1), **self.report}

    def line(self) -> str:
        r = self.report
        gpus = ", ".join(f"{n} {s}" for s, n in sorted((r.get("gpus") or {}).items())) or "no GPUs"
        what = f"{r.get('role', '?')}, {gpus}, {r.get('trainers', 0)} trainer(s)"
        problems = "; ".join(r.get("problems") or [])
        return f"{self.health:<15} reported {self.age_s:.0f}s ago ({what}){': ' + problems if problems else ''}"


def judge(report: dict[str, Any], now: float, stale_after_s: float = STALE_AFTER_S) -> NodeReport:
    age = max(0.0, now - float(report.get("t", 0.0)))
    health = str(report.get("health", "unknown"))
    if age > stale_after_s:
        health = "stale"
    return NodeReport(str(report.get("node")), health, age, report)


def read_reports(folder: Path, now: float, stale_after_s: float = STALE_AFTER_S) -> dict[str, NodeReport]:
    """Every node's report in the folder, by node name; unreadable files are skipped."""
    out: dict[str, NodeReport] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(report, dict) and report.get("node") == path.stem:
            out[path.stem] = judge(report, now, stale_after_s)
    return out
