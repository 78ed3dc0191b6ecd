"""`lamplighter node-status`: what this node's daemon sees now, from its status socket.

Run on the node itself (the socket answers only locally): its role, health
and GPUs, the lamplighter trainers it watches and the jobs they belong to,
each job's Lighthouse and progress, the actions it still has pending and its
latest events. The socket is 0660: root, or a member of its group, may read.
For every node at once from a login node: `lamplighter nodes`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from lamplighter.commands.validate import report_invalid
from lamplighter.configs.loader import ConfigError

EXIT_FAILED = 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "node-status",
        help="this node's daemon: health, GPUs, trainers, jobs, pending actions (its status socket)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  lamplighter node-status\n  lamplighter node-status --json | jq .gpus\n"
        "  lamplighter node-status --socket /run/lamplighter/status.sock\n\n"
        "exit status: 0 read, 1 the daemon did not answer, 2 bad input (the node config)",
    )
    p.add_argument(
        "--config", default=None, help="node config naming status_socket (default /etc/lamplighter/node.yaml)"
    )
    p.add_argument("--socket", type=Path, default=None, help="the status socket (default: the config's status_socket)")
    p.add_argument("--json", action="store_true", help="the daemon's whole status document")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lamplighter.commands.node_check import environ, node_config
    from lamplighter.supervisor.status_socket import StatusError, read_status

    path = args.socket
    if path is None:
        try:
            path = Path(node_config(args.config, [], environ()).status_socket)
        except ConfigError as e:
            return report_invalid(e)
    try:
        doc = read_status(path)
    except StatusError as e:
        print(
            f"lamplighter node-status: error: {e}; is lamplighter-node.service running here "
            "(systemctl status lamplighter-node)?",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(json.dumps(doc, indent=2) if args.json else format_status(doc, time.time()))
    return 0


def format_status(doc: dict[str, Any], now: float) -> str:
    """The status document in a few lines; what it lacks (another role, an older daemon) is left out."""
    from lamplighter.supervisor.health_report import summarize

    s = summarize(doc, now)
    lines = [
        f"node {doc.get('node', '?')}: {s['health']} ({doc.get('role', '?')} daemon, pid {doc.get('pid', '?')}, "
        f"{doc.get('cycles', '?')} cycles, metrics port {doc.get('metrics_port') or 'off'})"
    ]
    if doc.get("error"):
        lines.append(f"  last cycle failed: {doc['error']}")
    gpus = doc.get("gpus") or []
    ok = sum(1 for g in gpus if g.get("status") == "ok")
    lines.append(f"gpus: {ok} of {len(gpus)} ok" if gpus else "gpus: none watched")
    lines += [f"  {g.get('gpu')}: {g.get('status')}: {g.get('reason')}" for g in gpus if g.get("status") != "ok"]
    roots = [t for t in doc.get("trainers") or [] if t.get("root", True)]
    lines.append(f"trainers: {len(roots)} task root(s)")
    lines += [
        f"  {t.get('job')} g{t.get('replica_id')} attempt {t.get('attempt')}  pid {t.get('pid')}  Slurm job {t.get('job_id')}"
        for t in roots
    ]
    for j in doc.get("jobs") or []:
        lh = j.get("lighthouse") or "-"
        err = f" (cannot read: {j['lighthouse_error']})" if j.get("lighthouse_error") else ""
        lines.append(f"job {j.get('job')}: progress from {j.get('progress')}, Lighthouse {lh}{err}")
        if j.get("config_error"):
            lines.append(f"  its config could not be read: {j['config_error']}")
    pending = doc.get("pending") or []
    lines.append(f"pending actions: {len(pending) or 'none'}")
    lines += [f"  {p.get('kind', p.get('action'))} {p.get('target')}: {p.get('reason')}" for p in pending]
    events = (doc.get("recent_events") or [])[-5:]
    if events:
        lines.append("recent events:")
        lines += [f"  {e.get('kind', '?')} {e.get('target', '')}: {e.get('reason', '')}" for e in events]
    return "\n".join(lines)
