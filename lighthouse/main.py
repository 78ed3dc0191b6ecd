"""Run torchft's Lighthouse without importing torch: `python -m lamplighter.lighthouse.main ARGS`.

The `torchft_lighthouse` script imports the `torchft` package, whose
__init__ imports torch: 1.5 s to start on an idle machine and 6 s measured on
a busy one, during which no group can take a quorum. The Lighthouse itself
lives in the Rust extension `torchft._torchft`, which needs nothing from
torch, so this loads that one file directly and starts in about 0.1 s.
It takes torchft_lighthouse's flags and runs the same server class
(`LighthouseServer`, what main.py runs) until it is killed.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from types import ModuleType


def find_extension() -> Path:
    """torchft/_torchft*.so in the installed torchft, located without importing torchft."""
    spec = importlib.util.find_spec("torchft")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("torchft is not installed in this environment")
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            cand = Path(folder) / f"_torchft{suffix}"
            if cand.exists():
                return cand
    raise ImportError(f"no torchft._torchft extension in {list(spec.submodule_search_locations)}")


def load_extension() -> ModuleType:
    """torchft's native module (Lighthouse, Manager server and clients) without running torchft/__init__.py,
    which imports torch (about 220 MB more per process): the lab's torch-free replicas use it too."""
    path = find_extension()
    spec = importlib.util.spec_from_file_location("torchft._torchft", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def published_port(path: Path) -> int | None:
    try:
        port = json.loads(path.read_text()).get("port")
    except (OSError, ValueError, AttributeError):
        return None
    return port if isinstance(port, int) and 0 < port < 65536 else None


def publish(path: Path, server_address: str, advertise: str | None) -> None:
    """Write where this Lighthouse listens, atomically: the job's groups and supervisors read it there."""
    parts = urllib.parse.urlsplit(server_address)
    host = advertise or parts.hostname or socket.gethostname()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    record = {
        "address": f"http://{host}:{parts.port}",
        "port": parts.port,
        "pid": os.getpid(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "started_at": time.time(),
    }
    # Imported here, like this module's other lamplighter imports: nothing loads before the Lighthouse needs it.
    from lamplighter.rundir.contract import write_json_atomic

    write_json_atomic(path, record, umask=True)  # 0666 less the umask, as before: not mkstemp's 0600


WILDCARDS = ("", "0.0.0.0", "[::]", "::")
# Its exit status when it cannot listen where it was told (the Lighthouse job's script gives up on it).
CANNOT_LISTEN = 3


class NodeAddressError(RuntimeError):
    """This node's host name resolves to no address other machines could reach."""


def node_address(name: str | None = None) -> str:
    """The address this node's host name resolves to, never a loopback one (IPv4 first), as the groups find
    theirs with $(hostname); on Debian a host name often maps to 127.0.1.1 alone, which no peer reaches."""
    import ipaddress

    name = name or socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError as e:
        raise NodeAddressError(f"this node's host name {name!r} does not resolve ({e})") from e
    found = list(dict.fromkeys(str(i[4][0]) for i in infos))
    usable = [a for a in found if not ipaddress.ip_address(a.split("%")[0]).is_loopback]
    if not usable:
        raise NodeAddressError(
            f"this node's host name {name!r} resolves only to loopback ({', '.join(found)}), which the groups' "
            "nodes cannot reach"
        )
    return sorted(usable, key=lambda a: ":" in a)[0]


def own_url(host: str, port: int | None) -> str:
    """Where this process reaches its own server: the host it bound (torchft's address() names the machine,
    which need not resolve to that address), loopback for a wildcard bind."""
    return f"http://{'127.0.0.1' if host in WILDCARDS else host}:{port}"


def watch_status(
    own: str,
    steps: Path | None,
    memory: Path | None,
    remember_after: float,
    join_timeout_ms: int | None = None,
    every_s: float = 0.25,
) -> None:
    """Poll this Lighthouse's own /status until the process ends: record step changes, remember who is alive,
    and say when its quorums keep leaving live groups out (quorum_churn.py).

    Nothing is remembered before `remember_after` (time.time()): while it stands in for the replicas of
    its last life, its own heartbeats for them must not be taken for theirs."""
    from lamplighter.lighthouse.memory import Memory
    from lamplighter.lighthouse.quorum_churn import QuorumChurn
    from lamplighter.lighthouse.status import LighthouseStatusError, fetch_status
    from lamplighter.lighthouse.steplog import LighthouseStepLog

    log = LighthouseStepLog(steps) if steps is not None else None
    churn = QuorumChurn(join_timeout_ms)
    while True:
        try:
            now = time.time()
            status = fetch_status(own, timeout=2.0)
            if log is not None:
                log.record(now, status)
            if (warning := churn.observe(now, status)) is not None:
                print(f"lighthouse_main: {warning}", file=sys.stderr, flush=True)
            if memory is not None and now >= remember_after:
                alive = tuple(sorted(h.replica_id for h in status.heartbeats if not h.old))
                if alive:
                    Memory(now, alive).save(memory)
        except (LighthouseStatusError, OSError) as e:
            print(f"lighthouse_main: reading its own status: {e}", file=sys.stderr)
        time.sleep(every_s)


def stand_in_for_last_life(module: object, own: str, memory: Path, grace_ms: int) -> float:
    """Heartbeat for the replicas a recent memory names, for grace_ms; returns when remembering may resume."""
    from lamplighter.lighthouse.memory import Memory, start_stand_in, to_stand_in_for

    replicas = to_stand_in_for(Memory.load(memory), time.time())
    if not replicas or grace_ms <= 0:
        return time.time()
    print(
        f"lighthouse_main: restarted; standing in for {len(replicas)} replicas seen alive before "
        f"({', '.join(replicas)}) for {grace_ms} ms",
        file=sys.stderr,
        flush=True,
    )
    start_stand_in(
        lambda: module.LighthouseClient(own, timedelta(seconds=2)),  # type: ignore[attr-defined]
        replicas,
        grace_ms / 1000,
    )
    return time.time() + grace_ms / 1000 + 1.0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lighthouse_main", description="torchft's Lighthouse, started without torch")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--bind", help="HOST:PORT to listen on")
    where.add_argument(
        "--bind-node-port",
        type=int,
        metavar="PORT",
        help="listen on the address of this node (its host name's, never loopback) at PORT (0: a free one), and "
        "publish that address: a Slurm job's Lighthouse, found where Slurm put it",
    )
    ap.add_argument("--min_replicas", type=int, required=True)
    ap.add_argument("--join_timeout_ms", type=int, default=None)
    ap.add_argument("--quorum_tick_ms", type=int, default=None)
    ap.add_argument("--heartbeat_timeout_ms", type=int, default=None)
    ap.add_argument(
        "--publish",
        type=Path,
        default=None,
        help="once listening, write the address here (a job's <run_dir>/lighthouse.json); with port 0 in --bind, "
        "the port published there before is tried first, so a restarted Lighthouse keeps its address",
    )
    ap.add_argument("--advertise", default=None, help="host name to publish (default: the one the server reports)")
    ap.add_argument(
        "--remember",
        type=Path,
        default=None,
        help="keep the replicas seen alive in this file (a job's <run_dir>/lighthouse-memory.json); started on a "
        "recent one, stand in for them for --restart-grace-ms (lighthouse_memory.py)",
    )
    ap.add_argument("--restart-grace-ms", type=int, default=2000)
    ap.add_argument(
        "--record-steps",
        type=Path,
        default=None,
        help="append each replica's step changes here (lighthouse-steps.jsonl), for the report of a trainer "
        "that keeps no step log of its own",
    )
    args = ap.parse_args(argv)
    if args.bind is None:
        try:
            here = node_address()
        except NodeAddressError as e:
            print(
                f"lighthouse_main: cannot listen on this node: {e}; set lighthouse.host to an address of "
                "slurm.head_node that the groups' nodes reach",
                file=sys.stderr,
            )
            return CANNOT_LISTEN
        args.bind = f"[{here}]:{args.bind_node_port}" if ":" in here else f"{here}:{args.bind_node_port}"
    module = load_extension()

    def serve(bind: str) -> object:
        return module.LighthouseServer(
            bind=bind,
            min_replicas=args.min_replicas,
            join_timeout_ms=args.join_timeout_ms,
            quorum_tick_ms=args.quorum_tick_ms,
            heartbeat_timeout_ms=args.heartbeat_timeout_ms,
        )

    host, _, port = args.bind.rpartition(":")
    previous = published_port(args.publish) if args.publish is not None and port == "0" else None
    server = None
    if previous is not None:
        try:
            server = serve(f"{host}:{previous}")
        except Exception as e:  # the old port is taken now: any free one will do
            print(
                f"lighthouse_main: port {previous} published before is not free ({e}); binding {args.bind}",
                file=sys.stderr,
            )
    if server is None:
        try:
            server = serve(args.bind)
        except Exception as e:  # an address of another machine, a port in use: say which, and stop
            print(
                f"lighthouse_main: cannot listen on {args.bind}: {e} (lighthouse.host must be an address of the "
                "machine the Lighthouse runs on: on Slurm, slurm.head_node's)",
                file=sys.stderr,
            )
            return CANNOT_LISTEN
    address = str(server.address())  # type: ignore[attr-defined]
    own = own_url(host, urllib.parse.urlsplit(address).port)
    remember_after = time.time()
    if args.remember is not None:  # before publishing: the groups reconnect as soon as they can
        remember_after = stand_in_for_last_life(module, own, args.remember, args.restart_grace_ms)
    if args.publish is not None:
        publish(args.publish, address, args.advertise or (None if host in WILDCARDS else host))
    threading.Thread(
        target=watch_status,
        args=(own, args.record_steps, args.remember, remember_after, args.join_timeout_ms),
        daemon=True,
        name="status",
    ).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while server is not None:  # it serves on torchft's own threads while referenced, until this process is killed
        signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
