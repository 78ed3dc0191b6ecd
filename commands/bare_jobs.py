"""`lamplighter submit|status|cancel` for a job with `placement: bare-metal`, and `lamplighter hosts`.

A bare-metal job lives in etcd: submit writes its validated config under the
submitter's own key (specs/<user>/<job>: etcd lets only that user write there,
and the hosts run the job's trainers as that user's account), refused if the
name is taken; the placer of the cluster's host daemons places its groups,
status reads it back (and any host's refusal to run it), and cancel deletes
the spec, after which every host kills that job's trainers and the placer
forgets its placements. `lamplighter submit job.yaml` picks this path by
itself when the config says `placement: bare-metal`.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import sys
from pathlib import Path
from typing import Any

from lamplighter.bare import etcd_roles
from lamplighter.bare.etcd_store import Credentials, CredentialsError, EtcdError, Store, Tls, absent, delete, put
from lamplighter.bare.keys import Keys
from lamplighter.bare.placement import Assignment
from lamplighter.commands.validate import add_override_args, report_invalid
from lamplighter.configs.bare_metal import BareMetalJobConfig, EtcdConfig
from lamplighter.configs.loader import ConfigError, load_job, load_node
from lamplighter.configs.schema import JobConfig, ignored_off_local

EXIT_FAILED, EXIT_INVALID = 1, 2


def store_for(etcd: EtcdConfig) -> Store:
    """A client of the config's etcd, as its etcd user (CredentialsError: the password file will not do)."""
    tls = (
        Tls(etcd.ca_file, etcd.cert_file, etcd.key_file) if etcd.ca_file and etcd.cert_file and etcd.key_file else None
    )
    auth = Credentials.from_file(etcd.user, etcd.password_file) if etcd.user and etcd.password_file else None
    return Store(etcd.endpoints, timeout_s=etcd.timeout_s, tls=tls, auth=auth)


def submitter(etcd: EtcdConfig) -> str:
    """Whose jobs these are: the etcd user etcd authenticates; on a test machine without one (insecure_lab),
    this login's name, which nothing checks."""
    return etcd.user or pwd.getpwuid(os.getuid()).pw_name


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


def _store(bm: BareMetalJobConfig, command: str) -> Store | None:
    try:
        return store_for(bm.etcd)
    except CredentialsError as e:
        print(f"lamplighter {command}: error: {e}", file=sys.stderr)
        return None


def submit(job: JobConfig, args: argparse.Namespace) -> int:
    bm, keys = _where(job)
    for note in ignored_off_local(job):
        print(f"lamplighter submit: note: {note}", file=sys.stderr)
    store = _store(bm, "submit")
    if store is None:
        return EXIT_INVALID
    user = submitter(bm.etcd)
    taken = (
        f"lamplighter submit: error: job {job.name} is already on cluster {bm.cluster}: `lamplighter cancel` it "
        "first, or submit under another name (a job cancelled a moment ago is forgotten at the placer's next round)"
    )
    spec = keys.spec(user, job.name)
    try:
        # A job's name is the cluster's: placements under it belong to a job submitted before (anyone's).
        if store.prefix(keys.job(job.name))[1]:
            print(taken, file=sys.stderr)
            return EXIT_FAILED
        ok = store.txn(f"submit {job.name}", [absent(spec)], [put(spec, job.model_dump_json())])
    except EtcdError as e:
        print(f"lamplighter submit: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    if not ok:
        print(taken, file=sys.stderr)
        return EXIT_FAILED
    print(
        f"submitted {job.name} to bare-metal cluster {bm.cluster} as etcd user {user} ({job.groups.count} groups); "
        "the placer puts them on hosts, which run them as that user's account"
    )
    print(f"follow with: lamplighter status {getattr(args, 'config', job.name)}")
    return 0


def read_status(job: JobConfig, store: Store, keys: Keys, user: str) -> dict[str, Any]:
    """What a submitter may read (etcd_roles.py): the hosts, the placer, the job's placements and its own spec."""
    entries = [e for prefix in (keys.hosts, keys.outs, keys.job(job.name)) for e in store.prefix(prefix)[1]]
    by = {e.key: e for e in entries}
    groups = {}
    for g in range(job.groups.count):
        e = by.get(keys.group(job.name, g))
        groups[g] = (
            Assignment.from_json(e.value).__dict__ if e else {"host": None, "epoch": 0, "reason": "not placed yet"}
        )
    alive = sorted(Keys.last(k) for k in by if k.startswith(keys.hosts))
    out = {Keys.last(k): json.loads(e.value).get("reason", "") for k, e in by.items() if k.startswith(keys.outs)}
    refused = {
        Keys.last(k): json.loads(e.value).get("reason", "")
        for k, e in by.items()
        if k.startswith(keys.refusals(job.name))
    }
    placer = store.get(keys.placer)
    return {
        "job": job.name,
        "cluster": keys.cluster,
        "user": user,
        "submitted": store.get(keys.spec(user, job.name)) is not None,
        "placer": placer.value if placer else None,
        "hosts_alive": alive,
        "hosts_out": out,
        "refused_by": refused,
        "groups": groups,
    }


def format_status(st: dict[str, Any]) -> str:
    lines = [
        f"job {st['job']} of etcd user {st['user']} on bare-metal cluster {st['cluster']}"
        + ("" if st["submitted"] else " (NOT SUBMITTED)"),
        f"placer: {st['placer'] or 'none (no host daemon holds the role)'}; hosts alive: {', '.join(st['hosts_alive']) or 'none'}",
    ]
    lines += [f"host {h} taken out: {why}" for h, why in sorted(st["hosts_out"].items())]
    lines += [f"host {h} will not run it: {why}" for h, why in sorted(st["refused_by"].items())]
    lines.append(f"{'group':<6}{'host':<16}{'epoch':<7}reason")
    for g, a in sorted(st["groups"].items()):
        lines.append(f"{g:<6}{a['host'] or '-':<16}{a['epoch']:<7}{a['reason']}")
    return "\n".join(lines)


def status(job: JobConfig, args: argparse.Namespace) -> int:
    bm, keys = _where(job)
    store = _store(bm, "status")
    if store is None:
        return EXIT_INVALID
    try:
        st = read_status(job, store, keys, submitter(bm.etcd))
    except EtcdError as e:
        print(f"lamplighter status: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(st, indent=2) if getattr(args, "json", False) else format_status(st))
    return 0


def cancel(job: JobConfig, args: argparse.Namespace) -> int:
    bm, keys = _where(job)
    store = _store(bm, "cancel")
    if store is None:
        return EXIT_INVALID
    user = submitter(bm.etcd)
    spec = keys.spec(user, job.name)
    try:
        there = store.get(spec) is not None
        store.txn(f"cancel {job.name}", [], [delete(spec)])
    except EtcdError as e:
        print(f"lamplighter cancel: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    if not there:
        print(f"lamplighter cancel: no job {job.name} of etcd user {user} on cluster {bm.cluster}", file=sys.stderr)
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
        "  lamplighter hosts --config node.yaml resume h3\n"
        "  lamplighter hosts --config node.yaml roles --submitter alice --submitter bob --operator ops\n\n"
        "A host's own config may take out or resume that host only (its etcd role); another host needs an etcd\n"
        "user with the operator role (--set bare_metal.etcd.user=... --set bare_metal.etcd.password_file=...).\n"
        "roles prints the etcdctl commands (run as etcd's root user) that give each host of the config, each\n"
        "submitter and the operator its etcd user and role; then `etcdctl auth enable`.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, help="a host's node config (role: bare-metal): etcd and the host list")
    p.add_argument("action", nargs="?", choices=["list", "out", "resume", "roles"], default="list")
    p.add_argument("host", nargs="?", help="the host to take out or resume")
    p.add_argument("--reason", default="taken out by hand", help="why (out): shown by status and hosts")
    p.add_argument("--json", action="store_true", help="machine-readable output (list)")
    p.add_argument(
        "--submitter", action="append", default=[], help="roles: an etcd user who submits jobs (repeat for more)"
    )
    p.add_argument("--operator", action="append", default=[], help="roles: an etcd user who may take any host out")
    add_override_args(p)
    p.set_defaults(func=run_hosts)


def roles_script(keys: Keys, hosts: list[str], submitters: list[str], operators: list[str]) -> list[str]:
    """The etcdctl commands that set up a cluster's etcd users and roles (etcd_roles.py)."""
    lines = ["# As etcd's root user (etcdctl --user root ...); each `user add` asks for that user's password."]
    for h in hosts:
        lines += [f"# host {h}", *etcd_roles.etcdctl_lines(etcd_roles.host_role(keys, h), h)]
    for u in submitters:
        lines += [f"# submitter {u}", *etcd_roles.etcdctl_lines(etcd_roles.submitter_role(keys, u), u)]
    for u in operators:
        lines += [f"# operator {u}", *etcd_roles.etcdctl_lines(etcd_roles.operator_role(keys), u)]
    return lines


def run_hosts(args: argparse.Namespace) -> int:
    try:
        node = load_node(args.config, args.overrides, os.environ)
    except ConfigError as e:
        return report_invalid(e)
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
    keys = Keys(bm.cluster)
    if args.action == "roles":
        try:
            script = roles_script(keys, every, args.submitter, args.operator)
        except ValueError as e:
            print(f"lamplighter hosts roles: error: {e}", file=sys.stderr)
            return EXIT_INVALID
        print("\n".join(script))
        return 0
    try:
        store = store_for(bm.etcd)
    except CredentialsError as e:
        print(f"lamplighter hosts: error: {e}", file=sys.stderr)
        return EXIT_INVALID
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
