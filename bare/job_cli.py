"""`lamplighter submit|status|cancel` for a job with `placement: bare-metal`, and `lamplighter hosts`.

A bare-metal job lives in etcd: submit writes its validated config under the
cluster's key (refused if that job is already there), the placer of the
cluster's host daemons places its groups, status reads it back, and cancel
deletes it in one transaction, after which every host kills that job's
trainers (their assignments are gone). `lamplighter submit job.yaml` picks
this path by itself when the config says `placement: bare-metal`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from lamplighter.bare.etcd_store import EtcdError, Store, Tls, absent, delete, delete_prefix, put
from lamplighter.bare.keys import Keys
from lamplighter.bare.placement import Assignment
from lamplighter.configs.bare_metal import BareMetalJobConfig, EtcdConfig
from lamplighter.configs.loader import ConfigError, load_job, load_node
from lamplighter.configs.schema import JobConfig, ignored_off_local

EXIT_FAILED, EXIT_INVALID = 1, 2


def store_for(etcd: EtcdConfig) -> Store:
    tls = (
        Tls(etcd.ca_file, etcd.cert_file, etcd.key_file) if etcd.ca_file and etcd.cert_file and etcd.key_file else None
    )
    return Store(etcd.endpoints, timeout_s=etcd.timeout_s, tls=tls)


def bare_job(path: str, overrides: list[str] | None = None) -> JobConfig | None:
    """The job config at `path` if it is a bare-metal job; None for anything else (a Slurm job, a job name)."""
    if not Path(path).is_file():
        return None
    try:
        job = load_job(path, overrides or [], os.environ)
    except ConfigError:
        return None  # the Slurm path reports the problems
    return job if job.placement == "bare-metal" else None


def route(args: argparse.Namespace) -> Any:
    """Bare metal's runner for submit/status/cancel when the job's config says so; else None."""
    path = getattr(args, "config", None) if args.command == "submit" else getattr(args, "job", None)
    job = bare_job(path, getattr(args, "overrides", None)) if path else None
    if job is None:
        return None
    runner = {"submit": submit, "status": status, "cancel": cancel}[args.command]
    return lambda a: runner(job, a)


def _where(job: JobConfig) -> tuple[BareMetalJobConfig, Keys]:
    assert job.bare_metal is not None  # the schema requires it with placement bare-metal
    return job.bare_metal, Keys(job.bare_metal.cluster)


def submit(job: JobConfig, args: argparse.Namespace) -> int:
    bm, keys = _where(job)
    for note in ignored_off_local(job):
        print(f"lamplighter submit: note: {note}", file=sys.stderr)
    store = store_for(bm.etcd)
    try:
        ok = store.txn(
            f"submit {job.name}", [absent(keys.spec(job.name))], [put(keys.spec(job.name), job.model_dump_json())]
        )
    except EtcdError as e:
        print(f"lamplighter submit: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    if not ok:
        print(
            f"lamplighter submit: error: job {job.name} is already on cluster {bm.cluster}: "
            f"`lamplighter cancel` it first, or submit under another name",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(
        f"submitted {job.name} to bare-metal cluster {bm.cluster} ({job.groups.count} groups); the placer puts them on hosts"
    )
    print(f"follow with: lamplighter status {getattr(args, 'config', job.name)}")
    return 0


def read_status(job: JobConfig, store: Store, keys: Keys) -> dict[str, Any]:
    _, entries = store.prefix(keys.root)
    by = {e.key: e for e in entries}
    groups = {}
    for g in range(job.groups.count):
        e = by.get(keys.group(job.name, g))
        groups[g] = (
            Assignment.from_json(e.value).__dict__ if e else {"host": None, "epoch": 0, "reason": "not placed yet"}
        )
    alive = sorted(Keys.last(k) for k in by if k.startswith(keys.hosts))
    out = {Keys.last(k): json.loads(e.value).get("reason", "") for k, e in by.items() if k.startswith(keys.outs)}
    placer = by.get(keys.placer)
    return {
        "job": job.name,
        "cluster": keys.cluster,
        "submitted": keys.spec(job.name) in by,
        "placer": placer.value if placer else None,
        "hosts_alive": alive,
        "hosts_out": out,
        "groups": groups,
    }


def format_status(st: dict[str, Any]) -> str:
    lines = [
        f"job {st['job']} on bare-metal cluster {st['cluster']}" + ("" if st["submitted"] else " (NOT SUBMITTED)"),
        f"placer: {st['placer'] or 'none (no host daemon holds the role)'}; hosts alive: {', '.join(st['hosts_alive']) or 'none'}",
    ]
    lines += [f"host {h} taken out: {why}" for h, why in sorted(st["hosts_out"].items())]
    lines.append(f"{'group':<6}{'host':<16}{'epoch':<7}reason")
    for g, a in sorted(st["groups"].items()):
        lines.append(f"{g:<6}{a['host'] or '-':<16}{a['epoch']:<7}{a['reason']}")
    return "\n".join(lines)


def status(job: JobConfig, args: argparse.Namespace) -> int:
    bm, keys = _where(job)
    try:
        st = read_status(job, store_for(bm.etcd), keys)
    except EtcdError as e:
        print(f"lamplighter status: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(st, indent=2) if getattr(args, "json", False) else format_status(st))
    return 0


def cancel(job: JobConfig, args: argparse.Namespace) -> int:
    bm, keys = _where(job)
    prefix = keys.spec(job.name).rsplit("/", 1)[0] + "/"
    try:
        store_for(bm.etcd).txn(f"cancel {job.name}", [], [delete_prefix(prefix)])
    except EtcdError as e:
        print(f"lamplighter cancel: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"cancelled {job.name} on cluster {bm.cluster}: each host kills its trainers at its next poll")
    return 0


# -- lamplighter hosts ---------------------------------------------------------


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "hosts",
        help="bare-metal hosts: which are alive, taken out, spare; take one out or put it back",
        description="The hosts of a bare-metal cluster as etcd holds them. A host taken out (by its own GPU check, "
        "or by hand) gets no group until `lamplighter hosts resume HOST`.",
        epilog="examples:\n  lamplighter hosts --config /etc/lamplighter/node.yaml\n"
        "  lamplighter hosts --config node.yaml out h3 --reason 'fan replaced'\n"
        "  lamplighter hosts --config node.yaml resume h3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, help="a host's node config (role: bare-metal): etcd and the host list")
    p.add_argument("action", nargs="?", choices=["list", "out", "resume"], default="list")
    p.add_argument("host", nargs="?", help="the host to take out or resume")
    p.add_argument("--reason", default="taken out by hand", help="why (out): shown by status and hosts")
    p.add_argument("--json", action="store_true", help="machine-readable output (list)")
    p.set_defaults(func=run_hosts)


def run_hosts(args: argparse.Namespace) -> int:
    try:
        node = load_node(args.config, [], os.environ)
    except ConfigError as e:
        print("\n".join(str(p) for p in e.problems), file=sys.stderr)
        return EXIT_INVALID
    bm = node.bare_metal
    if bm is None:
        print(
            f"lamplighter hosts: error: {args.config} is not a bare-metal host config (role: bare-metal)",
            file=sys.stderr,
        )
        return EXIT_INVALID
    every = bm.hosts + bm.spares
    if args.action in ("out", "resume") and args.host not in every:
        print(
            f"lamplighter hosts: error: {args.host!r} is not a host of this cluster ({', '.join(every)})",
            file=sys.stderr,
        )
        return EXIT_INVALID
    keys, store = Keys(bm.cluster), store_for(bm.etcd)
    try:
        if args.action == "out":
            store.put(keys.out(args.host), json.dumps({"reason": args.reason}))
            print(f"{args.host} taken out ({args.reason}): its groups move at the placer's next round")
            return 0
        if args.action == "resume":
            store.txn(f"resume {args.host}", [], [delete(keys.out(args.host))])
            print(f"{args.host} back in service")
            return 0
        _, entries = store.prefix(keys.root)
    except EtcdError as e:
        print(f"lamplighter hosts: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    by = {e.key: e for e in entries}
    runs: dict[str, list[str]] = {}
    for k, entry in by.items():
        if "/groups/" in k:
            a = Assignment.from_json(entry.value)
            if a.host:
                runs.setdefault(a.host, []).append(f"{k.split('/jobs/')[1].split('/')[0]}/g{Keys.last(k)}")
    rows: list[dict[str, Any]] = []
    for h in every:
        out = by.get(keys.out(h))
        alive = by.get(keys.host(h))
        rows.append(
            {
                "host": h,
                "spare": h in bm.spares,
                "alive": alive is not None,
                "gpus": json.loads(alive.value).get("gpus") if alive else None,
                "out": json.loads(out.value).get("reason") if out else None,
                "groups": sorted(runs.get(h, [])),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    placer = by.get(keys.placer)
    print(f"cluster {bm.cluster}: placer {placer.value if placer else 'none'}")
    for r in rows:
        state = "alive" if r["alive"] else "DEAD (no lease)"
        role = "spare" if r["spare"] else "host"
        taken = f"  OUT: {r['out']}" if r["out"] else ""
        gpus = f"GPUs {r['gpus']}" if r["gpus"] else "GPUs not checked"
        print(f"{r['host']:<16}{role:<7}{state:<17}{gpus:<18}{', '.join(r['groups']) or '-'}{taken}")
    return 0
