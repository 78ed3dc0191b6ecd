"""`lamplighter nodes`: the nodes lamplighter took out of service, the node daemons' health, and resuming a node.

    lamplighter nodes                      drained/down nodes with a `lamplighter: ` reason (reason, age),
                                           and every daemon's published health (--cluster-status-dir)
    lamplighter nodes --all                every node out of service, whoever took it out
    lamplighter nodes resume [NODE]        check NODE's GPUs once (the daemon's GPU check); resume it in
                                           Slurm only if they are healthy, else refuse and say why
    lamplighter nodes release [--yes]      uninstalling or rolling back: list every node lamplighter took
                                           out (no GPU check) and, with --yes, resume them all; nodes
                                           anyone else took out are never touched

`nodes resume` reads the GPUs of the machine it runs on, so NODE is this host
by default (SLURMD_NODENAME, node.yaml's node_name, else the host name): run it
on the node (`ssh NODE lamplighter nodes resume`), or on the test cluster give
NODE and --gpusim-root (the simulated GPUs of every node). A node drained by someone
else (reason not starting with `lamplighter: `) is resumed only with --force.
Exit status: 0 listed / resumed (or nothing to resume), 1 refused or failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from lamplighter.commands.node_check import environ, gpu_env, local_node_name, node_config
from lamplighter.commands.validate import add_override_args, report_invalid
from lamplighter.configs.loader import ConfigError
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.drained_nodes import by_lamplighter, format_age, out_of_service
from lamplighter.slurm.run import SlurmCli, SlurmError
from lamplighter.supervisor.health_report import ENV_CLUSTER_STATUS_DIR

EXIT_FAILED = 1
EXIT_INVALID = 2


def add_cluster_status_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cluster-status-dir",
        default=None,
        help=f"where the node daemons publish their health (node.yaml cluster_status_dir; default ${ENV_CLUSTER_STATUS_DIR})",
    )


def cluster_status_dir(args: argparse.Namespace) -> Path | None:
    d = args.cluster_status_dir or os.environ.get(ENV_CLUSTER_STATUS_DIR)
    return Path(d) if d else None


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "nodes",
        help="nodes lamplighter drained (reason, age), node daemon health; `nodes resume NODE`",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--slurm-conf", default=None, help="SLURM_CONF for the Slurm commands")
    add_cluster_status_arg(p)
    p.add_argument("--all", action="store_true", help="every node out of service, not only lamplighter's")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_list)
    sp = p.add_subparsers(dest="nodes_command", metavar="COMMAND")
    r = sp.add_parser(
        "resume",
        help="check NODE's GPUs once; resume it in Slurm only if healthy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("node", metavar="NODE", nargs="?", default=None, help="the node to resume (default: this host)")
    r.add_argument("--slurm-conf", default=None, help="SLURM_CONF for the Slurm commands")
    r.add_argument(
        "--config", default=None, help="node config with the thresholds (default /etc/lamplighter/node.yaml)"
    )
    add_override_args(r)
    r.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="GPUs the node must have, fewer is a fault (default: gpu_count in the config)",
    )
    r.add_argument("--deadline", type=float, default=10.0, help="seconds for the GPU check (default 10)")
    r.add_argument("--force", action="store_true", help="resume a node someone else drained (after the GPU check)")
    r.add_argument(
        "--gpusim-root",
        type=Path,
        default=None,
        help="test cluster: simulated GPUs in DIR/<node> (any node, from here)",
    )
    r.set_defaults(func=run_resume)
    rel = sp.add_parser(
        "release",
        help="uninstall/rollback: resume every node lamplighter took out (--yes), no GPU check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rel.add_argument("--slurm-conf", default=None, help="SLURM_CONF for the Slurm commands")
    rel.add_argument("--yes", action="store_true", help="resume them (without it: only list what it would resume)")
    rel.set_defaults(func=run_release)


def _api(slurm_conf: str | None) -> SlurmActions:
    return SlurmActions(SlurmCli(slurm_conf=slurm_conf or os.environ.get("SLURM_CONF")))


def run_list(args: argparse.Namespace) -> int:
    from lamplighter.supervisor.health_report import read_reports

    now = time.time()
    try:
        nodes = _api(args.slurm_conf).nodes()
    except SlurmError as e:
        print(f"lamplighter nodes: error: cannot read the nodes from Slurm: {e}", file=sys.stderr)
        return EXIT_FAILED
    out = out_of_service(nodes, now, only_lamplighter=not args.all)
    folder = cluster_status_dir(args)
    reports = read_reports(folder, now) if folder is not None else {}
    if args.json:
        doc = {
            "out_of_service": [o.to_json() for o in out],
            "cluster_status_dir": None if folder is None else str(folder),
            "daemons": {n: r.to_json() for n, r in reports.items()},
        }
        print(json.dumps(doc, indent=2))
        return 0
    what = "out of service" if args.all else "taken out of service by lamplighter"
    print(f"nodes {what}: {len(out) or 'none'}")
    for o in out:
        print(f"  {o.name:<10}{o.state:<18}{format_age(o.age_s):>6}  {o.reason or '-'}")
    if folder is None:
        print(f"node daemons: not shown (give --cluster-status-dir or set ${ENV_CLUSTER_STATUS_DIR})")
    else:
        print(f"node daemons ({folder}): {len(reports) or 'no reports'}")
        for name, rep in reports.items():
            print(f"  {name:<10}{rep.line()}")
    return 0


def run_resume(args: argparse.Namespace) -> int:
    from lamplighter.supervisor.gpu.check_once import check_once
    from lamplighter.supervisor.gpu.worker import WorkerSpec

    env = environ()
    try:
        cfg = node_config(args.config, args.overrides, env)
    except ConfigError as e:
        return report_invalid(e)
    if args.node is None:
        args.node = local_node_name(cfg, env)
    api = _api(args.slurm_conf or cfg.slurm_conf)
    try:
        info = api.node(args.node)
    except (SlurmError, ValueError) as e:
        print(f"lamplighter nodes resume: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    if not (info.is_drained or info.is_down):
        print(f"{args.node} is in service ({info.state}): nothing to resume")
        return 0
    if not by_lamplighter(info) and not args.force:
        print(
            f"lamplighter nodes resume: refusing: {args.node} was taken out by someone else "
            f"({info.state}: {info.reason or 'no reason'}); give --force to resume it after the GPU check",
            file=sys.stderr,
        )
        return EXIT_FAILED
    here = local_node_name(cfg, env)
    if args.gpusim_root is None and args.node != here:
        print(
            f"lamplighter nodes resume: error: the GPU check reads this machine's GPUs ({here}), not {args.node}'s: "
            f"run it on {args.node} (ssh {args.node} lamplighter nodes resume)",
            file=sys.stderr,
        )
        return EXIT_INVALID
    try:
        workers_env = gpu_env(args.node, args.gpusim_root, env)
    except FileNotFoundError as e:
        print(f"lamplighter nodes resume: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    if not cfg.gpus:
        res_text, verdict = "no GPUs watched (gpus: false)", "healthy"
    else:
        expected = args.gpus if args.gpus is not None else cfg.gpu_count
        res = check_once(cfg.health, WorkerSpec(env=workers_env), args.deadline, expected)
        res_text, verdict = f"{res.summary()} ({res.elapsed_s:.2f} s)", res.verdict
    if verdict != "healthy":
        why = "the fault persists" if verdict == "faulty" else "its GPUs could not be checked"
        print(
            f"lamplighter nodes resume: refusing to resume {args.node}: {why}: {res_text}\n"
            f"  drained for: {info.reason or '-'}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    try:
        api.resume(args.node)
    except SlurmError as e:
        print(f"lamplighter nodes resume: error: GPU check passed but Slurm refused: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"resumed {args.node} (GPU check: {res_text}; was {info.state}: {info.reason or '-'})")
    return 0


def run_release(args: argparse.Namespace) -> int:
    """Hand every node lamplighter took out back to Slurm: what an admin does before removing lamplighter."""
    api = _api(args.slurm_conf)
    try:
        out = out_of_service(api.nodes(), time.time(), only_lamplighter=True)
    except SlurmError as e:
        print(f"lamplighter nodes release: error: cannot read the nodes from Slurm: {e}", file=sys.stderr)
        return EXIT_FAILED
    if not out:
        print("no node is out of service by lamplighter: nothing to release")
        return 0
    # A GPU fault's drain is released too: with lamplighter gone, the node is the admin's to judge, so each
    # reason is shown (a node drained for hardware keeps its fault).
    print(f"{'resuming' if args.yes else 'would resume'} {len(out)} node(s) lamplighter took out:")
    failed = 0
    for o in out:
        line = f"  {o.name:<10}{o.state:<18}{o.reason or '-'}"
        if not args.yes:
            print(line)
            continue
        try:
            api.resume(o.name)
            print(f"{line}  -> resumed")
        except SlurmError as e:
            failed += 1
            print(f"{line}  -> Slurm refused: {e}")
    if not args.yes:
        print("nothing changed: add --yes to resume them")
    return EXIT_FAILED if failed else 0
