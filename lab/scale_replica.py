"""Torch-free replica groups for the scale lab: torchft's own protocol through its native module, no model.

    python -m lamplighter.lab.scale_replica [--lighthouse URL] --groups 0,1,2 [--out FILE] [--step-s 1.0]

Each group does what torchft's Manager does for a group of one rank, without torch (the native module
is loaded as the Lighthouse is, lighthouse/main.py: about 14 MB instead of 230 MB): a
`ManagerServer` (the group's gRPC server, which heartbeats to the Lighthouse every heartbeat interval and
asks it for each quorum) and a `ManagerClient` that, every step, asks for a quorum (`_quorum`, as
Manager.start_quorum does), "computes" for step_s (a sleep) and asks `should_commit`. A heal takes the
quorum's max_step: no weights move.

What it leaves out, so what a measurement with it does not hold: no collectives, so a dead peer is noticed
only through the Lighthouse (a real survivor's allreduce fails first, then it asks for a quorum); no
process-group setup after a quorum change; no checkpoint transfer when healing.

Several groups may share one process (threads, each group with its own server and client) so that
hundreds fit on one machine; a group that is to be killed gets a process of its own.

FILE gets one JSON line per event: {"ev": "ready", "t", "pid", "groups", "replica_ids"} once every
group's server is up, then per step {"g": group, "t0": quorum asked, "t1": quorum returned, "t2":
should_commit returned (time.time()), "c": committed, "s": step after it, "qid": quorum id, "n": replica
world size, "heal": healed at this quorum}, and {"g", "t0", "err"} for a call that failed (retried).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import IO, Any

from lamplighter.lighthouse.main import load_extension


class EventLog:
    """One JSON object a line, whole lines only (several group threads write), flushed as written."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            self._stream.write(line)
            self._stream.flush()

    def close_and_exit(self, code: int) -> None:
        with self._lock:  # never a half-written line: hold the lock through exit
            self._stream.flush()
            os._exit(code)


class Group:
    """One replica group of one rank: its Manager server and the client its training loop would hold."""

    def __init__(
        self,
        native: Any,
        group: int,
        lighthouse: str,
        heartbeat_ms: int,
        connect_timeout_s: float,
        quorum_retries: int,
    ) -> None:
        self.group = group
        self.replica_id = f"{group}:{uuid.uuid4()}"  # as torchft's Manager: a restart is a new member
        self.server = native.ManagerServer(
            replica_id=self.replica_id,
            lighthouse_addr=lighthouse,
            hostname="127.0.0.1",
            bind="127.0.0.1:0",
            store_addr="127.0.0.1:0",  # no TCPStore: nothing here sets up a process group
            world_size=1,
            heartbeat_interval=timedelta(milliseconds=heartbeat_ms),
            connect_timeout=timedelta(seconds=connect_timeout_s),
            quorum_retries=quorum_retries,
        )
        self.client = native.ManagerClient(self.server.address(), connect_timeout=timedelta(seconds=connect_timeout_s))

    def run(self, log: EventLog, step_s: float, quorum_timeout_s: float, commit_timeout_s: float) -> None:
        step = 0
        while True:
            t0 = time.time()
            try:
                q = self.client._quorum(
                    group_rank=0,
                    step=step,
                    checkpoint_metadata="",
                    shrink_only=False,
                    timeout=timedelta(seconds=quorum_timeout_s),
                    commit_failures=0,
                    reconfigure_handle="",
                    init_sync=True,
                )
                t1 = time.time()
                if q.heal:
                    step = q.max_step  # what a heal from a live peer gives: its step (and weights)
                time.sleep(step_s)
                committed = bool(self.client.should_commit(0, step, True, timeout=timedelta(seconds=commit_timeout_s)))
            except Exception as e:  # a timeout or a lost Lighthouse: logged, and the next step asks again
                log.write({"g": self.group, "t0": t0, "err": str(e)[:300]})
                time.sleep(0.1)
                continue
            if committed:
                step += 1
            log.write(
                {
                    "g": self.group,
                    "t0": t0,
                    "t1": t1,
                    "t2": time.time(),
                    "c": committed,
                    "s": step,
                    "qid": q.quorum_id,
                    "n": q.replica_world_size,
                    "heal": bool(q.heal),
                }
            )


def parse_groups(text: str) -> list[int]:
    """'0,1,2' or '0-3,8' -> the group indices, in order, each once; ValueError on anything else."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"not a group or a range of groups: {part!r}")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"empty range of groups: {part!r}")
        out.extend(g for g in range(first, last + 1) if g not in out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scale_replica", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--lighthouse",
        default=os.environ.get("TORCHFT_LIGHTHOUSE"),
        help="http://host:port (default: $TORCHFT_LIGHTHOUSE, which lamplighter's in-job agent sets)",
    )
    ap.add_argument("--groups", type=parse_groups, required=True, help="group indices: 0,1,2 or 0-7")
    ap.add_argument("--out", default=os.devnull, help="the event file (JSON lines), appended to (default: none)")
    ap.add_argument("--step-s", type=float, default=1.0, help="the 'compute' of one step (a sleep)")
    ap.add_argument("--heartbeat-ms", type=int, default=100, help="the Manager's heartbeat interval")
    ap.add_argument("--quorum-timeout-s", type=float, default=10.0)
    ap.add_argument("--commit-timeout-s", type=float, default=5.0)
    ap.add_argument("--connect-timeout-s", type=float, default=10.0)
    ap.add_argument("--quorum-retries", type=int, default=0)
    args = ap.parse_args(argv)
    if not args.lighthouse:
        ap.error("no Lighthouse: give --lighthouse or set TORCHFT_LIGHTHOUSE")

    native = load_extension()
    log = EventLog(open(args.out, "a", encoding="utf-8"))  # noqa: SIM115 (open until os._exit)
    signal.signal(signal.SIGTERM, lambda *_: log.close_and_exit(0))
    groups = [
        Group(native, g, args.lighthouse, args.heartbeat_ms, args.connect_timeout_s, args.quorum_retries)
        for g in args.groups
    ]
    log.write(
        {
            "ev": "ready",
            "t": time.time(),
            "pid": os.getpid(),
            "groups": [g.group for g in groups],
            "replica_ids": [g.replica_id for g in groups],
        }
    )
    for g in groups:
        threading.Thread(
            target=g.run,
            args=(log, args.step_s, args.quorum_timeout_s, args.commit_timeout_s),
            daemon=True,
            name=f"group-{g.group}",
        ).start()
    while True:  # the groups run on their threads until SIGTERM (or SIGKILL: the fault this is for)
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
