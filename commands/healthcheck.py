"""`lamplighter healthcheck`: one GPU check of this node under a deadline, for Slurm's HealthCheckProgram and Prolog.

Healthy: exit 0, nothing changed. Faulty (a GPU faulty, unresponsive or
missing): the node is drained with the reason `lamplighter: healthcheck: ...`
and the exit status is 1; as a Prolog (--prolog) that non-zero status also
makes Slurm requeue the job, which then starts on another node. An admin's
drain is never overwritten. The cluster's one drain budget (max_drain_fraction
of the nodes out by lamplighter at once, within drain_window_s) holds when
Slurm runs this check on every node at the same instant: each drain is checked
against the others' after it is made, and undone if the budget was spent first
(slurm/drain_budget.py), so a wrong threshold cannot drain the whole cluster
within one HealthCheckInterval or as jobs land on nodes. Beyond the budget a
Prolog exits 0 and says so: the job starts on this node, since a failed Prolog
makes Slurm drain the node itself (`Prolog error`, measured on 22.05), past
the budget.
With `mode: observe` in the node config nothing is drained and a Prolog
exits 0 (no job's start fails): the drain it would have made is printed and
written, outcome "observed", to the node's action log (state_dir/actions.jsonl),
where every drain it makes or is refused is written too.
Could not check (amdsmi missing or not matching ROCm, say): nothing is
drained, exit 3 (0 with --prolog: lamplighter's own installation problem
must not stop jobs), and the message says what was found and how to fix it.
The check never resumes a node: `lamplighter nodes resume NODE` does.
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
from lamplighter.configs.slurm_names import REASON_PREFIX
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.drained_nodes import by_lamplighter, out_of_service
from lamplighter.slurm.run import SlurmCli, SlurmError

EXIT_HEALTHY = 0
EXIT_FAULTY = 1
EXIT_INVALID = 2
EXIT_UNCHECKED = 3
MAX_REASON = 900


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "healthcheck",
        help="check this node's GPUs once; drain it on a fault (Slurm HealthCheckProgram / Prolog)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="slurm.conf (deploy/README.md):\n"
        "  HealthCheckProgram=/usr/local/sbin/lamplighter-healthcheck   # exec lamplighter healthcheck\n"
        "  HealthCheckInterval=300\n"
        "  Prolog=/usr/local/sbin/lamplighter-prolog                    # exec lamplighter healthcheck --prolog\n"
        "  SchedulerParameters=nohold_on_prolog_fail\n\n"
        "exit status: 0 healthy, 1 faulty (node drained), 2 bad input, 3 could not check (0 with --prolog)",
    )
    p.add_argument("--config", default=None, help="node config (default /etc/lamplighter/node.yaml if present)")
    add_override_args(p)
    p.add_argument("--node", default=None, help="Slurm node name (default $SLURMD_NODENAME, node_name, host name)")
    p.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="GPUs this node must have, fewer is a fault (default: gpu_count in the config)",
    )
    p.add_argument("--deadline", type=float, default=10.0, help="seconds for the whole check (default 10)")
    p.add_argument("--prolog", action="store_true", help="run as Slurm's Prolog: exit 1 on a fault, so the job moves")
    p.add_argument("--no-drain", action="store_true", help="report only, change nothing in Slurm")
    p.add_argument("--slurm-conf", default=None, help="SLURM_CONF for scontrol (default: the node config's)")
    p.add_argument(
        "--gpusim-root", type=Path, default=None, help="tests: simulated GPUs in DIR/<node> instead of this node's"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lamplighter.supervisor.gpu.check_once import check_once
    from lamplighter.supervisor.gpu.worker import WorkerSpec

    t0 = time.monotonic()
    env = environ()
    try:
        cfg = node_config(args.config, args.overrides, env)
    except ConfigError as e:
        return report_invalid(e)
    node = local_node_name(cfg, env, args.node)
    if not cfg.gpus:
        print(f"lamplighter healthcheck: {node}: no GPUs watched (gpus: false in the node config)")
        return EXIT_HEALTHY
    try:
        workers_env = gpu_env(node, args.gpusim_root, env)
    except FileNotFoundError as e:
        print(f"lamplighter healthcheck: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    expected = args.gpus if args.gpus is not None else cfg.gpu_count
    res = check_once(cfg.health, WorkerSpec(env=workers_env), args.deadline, expected)
    out: dict[str, Any] = {
        "node": node,
        "verdict": res.verdict,
        "summary": summary_with_count(res, expected),
        "check_s": round(res.elapsed_s, 3),
        "gpus": [{"gpu": o.gpu, "status": o.status, "kind": o.kind, "reason": o.reason} for o in res.observations],
    }
    code = EXIT_HEALTHY
    if res.verdict == "faulty":
        code = EXIT_FAULTY
        if cfg.mode == "observe":
            out["drain"] = f"OBSERVE ONLY: would drain: {REASON_PREFIX}healthcheck: {out['summary']}"[:MAX_REASON]
            # Observing never fails a job's start (Slurm would drain the node for a failed Prolog).
            code = EXIT_HEALTHY if args.prolog else EXIT_FAULTY
        elif args.no_drain:
            out["drain"] = "not asked (--no-drain)"
        else:
            api = SlurmActions(SlurmCli(slurm_conf=args.slurm_conf or cfg.slurm_conf or env.get("SLURM_CONF")))
            out["drain"] = drain(api, node, out["summary"], cfg, limit=True, now=time.time())
            if args.prolog and not out["drain"].startswith("drained"):
                # A failed Prolog makes Slurm drain the node itself, past the budget: the job starts here, said.
                out["drain"] += "; the job starts on this node (a failed Prolog would make Slurm drain it)"
                code = EXIT_HEALTHY
        if not args.no_drain:
            audit(cfg, node, "prolog" if args.prolog else "healthcheck", out)
    elif res.verdict == "unknown":
        code = EXIT_HEALTHY if args.prolog else EXIT_UNCHECKED
    out["total_s"] = round(time.monotonic() - t0, 3)
    if args.json:
        print(json.dumps(out))
    else:
        stream = sys.stdout if res.verdict == "healthy" else sys.stderr
        print(f"lamplighter healthcheck: {node}: {res.verdict}: {out['summary']} ({res.elapsed_s:.2f} s)", file=stream)
        if "drain" in out:
            print(f"lamplighter healthcheck: {node}: {out['drain']}", file=stream)
    return code


def audit(cfg: Any, node: str, entry: str, out: dict[str, Any]) -> None:
    """The drain (done, refused or, observing, only decided) as one line of the node's action log, beside the
    daemon's: `lamplighter why` and the on-call read what every root entry point did or would have done."""
    from lamplighter.rundir.actions import ACTIONS_FILE, FileSink, format_action

    observed = cfg.mode == "observe"
    outcome = "observed" if observed else ("done" if str(out["drain"]).startswith("drained") else "refused")
    line = format_action(
        time.time(),
        node,
        "drain",
        node,
        str(out["drain"]).removeprefix("OBSERVE ONLY: "),
        {"type": entry, "verdict": out["verdict"], "summary": out["summary"]},
        outcome=outcome,
    )
    path = Path(cfg.state_dir) / ACTIONS_FILE
    try:
        sink = FileSink(path)
        try:
            sink(line)
        finally:
            sink.close()
    except OSError as e:  # the check's verdict stands; the audit line is lost and says so
        print(f"lamplighter healthcheck: {node}: cannot write the action log {path}: {e}", file=sys.stderr)


ENV_DRAIN_BARRIER = "LAMPLIGHTER_TEST_DRAIN_BARRIER"  # DIR:N, tests only


def test_barrier(node: str) -> None:
    """Tests only: wait, between the limit's check and the drain, until N checks have reached this point, so
    every node's check has read the cluster before any drains: the interleaving a limit checked beforehand
    cannot survive, made certain rather than hoped for."""
    spec = os.environ.get(ENV_DRAIN_BARRIER)
    if not spec:
        return
    folder, _, count = spec.rpartition(":")
    Path(folder, node).touch()
    deadline = time.monotonic() + 60
    while len(os.listdir(folder)) < int(count) and time.monotonic() < deadline:
        time.sleep(0.01)


def summary_with_count(res: Any, expected: int | None) -> str:
    """The check's summary, led by the GPU count when fewer than expected answered (a GPU off the bus is lost)."""
    from lamplighter.policy.node_faults import gpu_count_fault, gpus_found

    low = gpu_count_fault(expected, gpus_found(res.observations))
    return f"{low.reason}; {res.summary()}" if low is not None and res.verdict == "faulty" else str(res.summary())


def drain(api: SlurmActions, node: str, why: str, cfg: Any, limit: bool, now: float) -> str:
    """Drain `node` with lamplighter's reason; what was done, in words. Never overwrites another drain's reason,
    nor re-stamps lamplighter's own (its place in the cluster's budget is its stamp: slurm/drain_budget.py)."""
    from lamplighter.policy.ratelimit import may_drain
    from lamplighter.slurm.drain_budget import confirm_drain

    reason = (REASON_PREFIX + "healthcheck: " + why)[:MAX_REASON]
    try:
        nodes = api.nodes()
    except SlurmError as e:
        return f"NOT drained: cannot read the nodes from Slurm: {e}"
    mine = next((n for n in nodes if n.name == node), None)
    if mine is None:
        return f"NOT drained: Slurm has no node {node!r} (give --node)"
    if (mine.is_drained or mine.is_down) and not by_lamplighter(mine):
        return f"NOT drained: already out of service by someone else ({mine.state}: {mine.reason})"
    if mine.is_drained and by_lamplighter(mine):
        return f"drained already: {mine.reason}"
    if limit:
        history = [(now, n.name) for n in out_of_service(nodes, now, only_lamplighter=True)]
        allowed, why_limit = may_drain(now, history, len(nodes), cfg.max_drain_fraction, cfg.drain_window_s, node=node)
        if not allowed:
            return f"NOT drained: {why_limit}"
    test_barrier(node)
    try:
        api.drain(node, reason)
    except SlurmError as e:
        return f"NOT drained: {e}"
    if limit:
        claim = confirm_drain(api, node, cfg.max_drain_fraction)
        if not claim.kept:
            return f"NOT drained: {claim.reason}"
    return f"drained: {reason}"
