"""The helper's side: as the job's user, read and parse what the daemon asks, answer one record each.

Forked by the zygote (zygote.py), it first becomes the user: no supplementary groups, the user's
primary group, the uid in all three slots, every capability dropped (and checked), no new privileges,
not dumpable. Then it says hello (the uid it runs as) and serves requests on its one socket until the
daemon closes it. Each request is one of:
    {"op": "settings", "path": P}                  job.json: configs/job_file.py and the schema
    {"op": "address", "run_dir": R}                lighthouse.json: rundir/contract.py
    {"op": "status", "address": A, "timeout": T}   the Lighthouse's /status: lighthouse/status.py
The files are read as a regular file of the helper's own uid (the job's user), bounded, as the
daemon read them itself before. Whatever goes wrong is an answer saying so; an exception that
escapes a reader ends the helper, and the daemon sees a failed read.
"""

from __future__ import annotations

import os
import socket
import ssl
from pathlib import Path
from typing import Any

from lamplighter.configs.job_file import JobFileVersionError, job_file_json, parse_job_file
from lamplighter.configs.loader import ConfigError
from lamplighter.configs.schema import JobConfig
from lamplighter.lighthouse.status import LighthouseStatusError, fetch_status, parse_status
from lamplighter.rundir.as_user import become
from lamplighter.rundir.contract import lighthouse_address
from lamplighter.supervisor.node.job_settings import read_job_settings
from lamplighter.supervisor.user_reads import records, wire

REQUEST_MAX_BYTES = 64 << 10
# A page of the shape torchft's /status has: parsing it once in the zygote does the parsers' lazy imports.
WARM_PAGE = (
    "<div>Current quorum_id: 1</div><div>Next quorum status: Valid &amp; ready</div>"
    '<div class="member">g0:u<br/>Step: 1<br/>Manager: m<br/>TCPStore: s<br/>World size: 1</div>'
    '<div class="heartbeat">g0:u: seen 1.5ms ago</div>'
)


def warm() -> None:
    """In the zygote, before any helper: every import the readers do lazily (pydantic's, html's, the
    hostname codec's). A helper, once the user, may not be able to read the interpreter's files (a venv
    under /root): what it has not imported by then it cannot import."""
    parse_job_file(job_file_json(JobConfig(name="warm")), "<warm>")
    for bad in ('{"format_version": 1, "nme": 1, "health": {"hang_timeout_s": -1}}', '{"format_version": 99}', "["):
        try:
            parse_job_file(bad, "<warm>")
        except (ConfigError, JobFileVersionError):
            pass
    parse_status(WARM_PAGE)
    "lamplighter.invalid".encode("idna")
    try:
        socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)
        ssl.create_default_context()
    except OSError:
        pass
    records.status_from(records.status_record(parse_status(WARM_PAGE)))
    records.settings_from(records.settings_record(read_job_settings(None, 0)), "<warm>", 0)


def answer(req: dict[str, Any]) -> dict[str, Any]:
    op = req.get("op")
    if op == "settings":
        return records.settings_record(read_job_settings(str(req["path"]), os.getuid()))
    if op == "address":
        return records.address_record(*lighthouse_address(Path(str(req["run_dir"])), os.getuid()))
    if op == "status":
        try:
            return records.status_record(fetch_status(str(req["address"]), timeout=float(req["timeout"])))
        except LighthouseStatusError as e:
            return records.status_error_record(e)
    raise ValueError(f"unknown request {op!r}")


def serve(sock: socket.socket, uid: int, gid: int) -> None:
    """The helper's life, in the forked child: never returns to the zygote's code."""
    try:
        become(uid, gid)
    except OSError as e:
        wire.send(sock, {"error": f"cannot become uid {uid} gid {gid}: {e}"})
        return
    wire.send(sock, {"uid": os.getuid(), "gid": os.getgid()})
    while True:
        try:
            req = wire.recv(sock, REQUEST_MAX_BYTES, None)
        except wire.WireError:
            return
        if req is None:
            return  # the daemon closed its end (or ended)
        wire.send(sock, answer(req))
