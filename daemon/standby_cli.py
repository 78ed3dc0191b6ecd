"""`lamplighter standby --config node.yaml`: the node's warm standbys for Slurm tasks, a service of its own.

It is not part of `lamplighter supervise` on purpose: a standby becomes a
user's trainer, so it must not inherit the supervisor's sandbox (read-only
home, no setuid, a system-call filter). lamplighter-standby.service runs it
as root without that hardening; each standby drops to its task's user when
it is taken. Stopping it stops the idle standbys only: trainers started from
standbys belong to their Slurm tasks and train on.

    lamplighter standby --config /etc/lamplighter/node.yaml      # the service
    lamplighter standby --config /etc/lamplighter/node.yaml --status   # ask the running one
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lamplighter.configs.loader import ConfigError, load_node
from lamplighter.configs.validate_cli import add_override_args, report_invalid
from lamplighter.daemon.standby_broker import StandbyBroker, read_broker_status

log = logging.getLogger("lamplighter.standby")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "standby",
        help="keep warm standbys for this node's Slurm tasks (systemd service)",
        description="Keep node.yaml's standby.count processes past their imports (torch, torchft) and hand one "
        "to each task of a job with slurm.standby_socket, which then starts warm instead of importing anew.",
        epilog="Idle standbys cost about 300 MB each and no CPU. See deploy/systemd/lamplighter-standby.service.",
    )
    p.add_argument(
        "--config", required=True, help="node config YAML (its standby section; e.g. /etc/lamplighter/node.yaml)"
    )
    add_override_args(p)
    p.add_argument("--status", action="store_true", help="print the running service's standbys as JSON, then exit")
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    try:
        cfg = load_node(args.config, args.overrides, os.environ)
    except ConfigError as e:
        return report_invalid(e)
    if args.status:
        try:
            print(json.dumps(read_broker_status(Path(cfg.standby.socket)), indent=2))
        except OSError as e:
            print(f"error: standby socket {cfg.standby.socket}: {e}", file=sys.stderr)
            return 1
        return 0
    if cfg.standby.count == 0:
        print(f"error: {args.config}: standby.count is 0: no standby to keep", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    state = Path(cfg.state_dir) / "standby"
    broker = StandbyBroker(cfg.standby, os.environ, state, time.monotonic())
    try:
        broker.start()
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    log.info("keeping %d standby(s) on %s (logs in %s)", cfg.standby.count, cfg.standby.socket, state)
    try:
        while not stop.is_set():
            broker.cycle(time.monotonic())
            stop.wait(cfg.health.poll_interval_s)
    finally:
        broker.close()
    log.info("stopped: idle standbys ended; trainers started from them go on with their tasks")
    return 0
