"""`lamplighter validate [JOB.yaml] [--node NODE.yaml]`: check configs, alone and together, without starting anything.

A node config given where a job's goes (it has `role:` and no `name:`) is
validated as the node config it is, and the output says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

from lamplighter.configs.helper_python import check_helper_python
from lamplighter.configs.job_warnings import job_warnings
from lamplighter.configs.loader import ENV_OVERRIDES, MORE_CHECKS, ConfigError, load_job, load_node
from lamplighter.configs.schema import (
    TRAINER_PLACEHOLDERS,
    JobConfig,
    NodeConfig,
    container_path_problems,
    node_job_problems,
)
from lamplighter.configs.torchtitan_module import check_module_comm

EXIT_INVALID = 2
JOB_EXAMPLE = "lighthouse.port=29511"
NODE_EXAMPLE = "health.probe_deadline_s=5"


def add_override_args(p: argparse.ArgumentParser, example: str | None = None) -> None:
    """--set; its example is a node config's key for a command that reads one (it has --config), else a job's."""
    if example is None:
        example = NODE_EXAMPLE if "--config" in p._option_string_actions else JOB_EXAMPLE
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a config value, e.g. --set {example} (repeatable; applied after ${ENV_OVERRIDES})",
    )


def report_invalid(e: ConfigError) -> int:
    """Print every problem of an invalid config on stderr; returns the exit status for bad input."""
    for problem in e.problems:
        print(f"error: {problem}", file=sys.stderr)
    if e.incomplete:
        print(f"note: {MORE_CHECKS}", file=sys.stderr)
    return EXIT_INVALID


def errors_json(e: ConfigError) -> dict[str, object]:
    """An invalid config as CI reads it: {"valid": false, "errors": [{file, line, key, message}]}."""
    return {
        "valid": False,
        "complete": not e.incomplete,  # false: more checks run once these are fixed
        "errors": [{"file": p.source, "line": p.line, "key": p.key, "message": p.message} for p in e.problems],
    }


def looks_like_node_config(path: str) -> bool:
    """A mapping with `role:` and no `name:` (a job always has a name); anything unreadable is left to the loader."""
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(doc, dict) and "role" in doc and "name" not in doc


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check a job config, a node config, or both together; exit 0 if usable, 2 if not",
        description=(
            "Check a config file against the schema and the torchft timeout hierarchy. Every problem is "
            "reported with its file, line and key. With a job and --node, also check the two against each "
            "other (the node daemon applies the job's thresholds at the node's pace), one line per broken rule. Nothing is started or submitted. Exit status: "
            "0 valid, 2 invalid."
        ),
        epilog="examples:\n  lamplighter validate configs/demo.yaml\n"
        "  lamplighter validate --node /etc/lamplighter/node.yaml\n"
        "  lamplighter validate configs/llama3-8b-mi325x.yaml --node configs/head.yaml\n"
        "  lamplighter validate configs/slurm-lab.yaml --set groups.count=4 --json\n\n"
        "trainer.command placeholders (filled per group at launch; an unknown one is an error):\n  "
        + " ".join("{" + k + "}" for k in TRAINER_PLACEHOLDERS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", nargs="?", help="job config YAML")
    p.add_argument("--node", metavar="NODE.yaml", help="a node supervisor config (node.yaml, head.yaml)")
    p.add_argument(
        "--json",
        action="store_true",
        help='print the resolved config (defaults filled in) as JSON; if invalid, {"valid": false, "errors": [...]}',
    )
    add_override_args(p)
    p.set_defaults(func=run)


def _load(args: argparse.Namespace) -> tuple[JobConfig | None, NodeConfig | None]:
    # --set applies to the job when there is one, else to the node config.
    job = load_job(args.file, args.overrides, os.environ) if args.file else None
    node = load_node(args.node, () if args.file else args.overrides, os.environ) if args.node else None
    return job, node


def run(args: argparse.Namespace) -> int:
    if not args.file and not args.node:
        print("error: give a job config, --node NODE.yaml, or both", file=sys.stderr)
        return EXIT_INVALID
    if args.file and not args.node and looks_like_node_config(args.file):
        # validate node.yaml: what was meant is clear, so check it as one rather than list its keys as unknown.
        print(f"{args.file}: looks like a node config (it has role:): checking it as one (--node)", file=sys.stderr)
        args.file, args.node = None, args.file
    try:
        job, node = _load(args)
    except ConfigError as e:
        if args.json:
            print(json.dumps(errors_json(e), indent=2))
            return EXIT_INVALID
        report_invalid(e)
        n = len(e.problems)
        print(f"{args.file or args.node}: invalid ({n} problem{'s' * (n != 1)})", file=sys.stderr)
        return EXIT_INVALID
    if job is not None and node is not None:
        problems = node_job_problems(node, job)
        if problems and args.json:
            where = f"{args.file} with {args.node}"
            errors = [{"file": where, "line": None, "key": "", "message": p} for p in problems]
            print(json.dumps({"valid": False, "complete": True, "errors": errors}, indent=2))
            return EXIT_INVALID
        for problem in problems:
            print(f"error: {args.file} with {args.node}: {problem}", file=sys.stderr)
        if problems:
            n = len(problems)
            print(f"{args.file} with {args.node}: incompatible ({n} problem{'s' * (n != 1)})", file=sys.stderr)
            return EXIT_INVALID
    titan = check_module_comm(job, Path(args.file)) if job is not None else None
    found = [("trainer.command", p) for p in titan.problems] if titan is not None else []
    found += container_problems(job) if job is not None else []
    if found:
        if args.json:
            errors = [{"file": str(args.file), "line": None, "key": key, "message": p} for key, p in found]
            print(json.dumps({"valid": False, "complete": True, "errors": errors}, indent=2))
            return EXIT_INVALID
        for key, problem in found:
            print(f"error: {args.file}: {key}: {problem}", file=sys.stderr)
        print(f"{args.file}: invalid ({len(found)} problem{'s' * (len(found) != 1)})", file=sys.stderr)
        return EXIT_INVALID
    if args.json:
        doc: dict[str, object] = {}
        if job is not None:
            doc["job"] = job.model_dump(mode="json")
        if node is not None:
            doc["node"] = node.model_dump(mode="json")
        print(json.dumps(doc["job"] if node is None else doc["node"] if job is None else doc, indent=2))
        return 0
    if job is not None:
        print(summary(job, args.file))
        helpers = check_helper_python(job)
        print(helpers.line())
        for warning in helpers.warnings + job_warnings(job):
            print(f"warning: {args.file}: {warning}", file=sys.stderr)
        if titan is not None:
            print(titan.line)
            for warning in titan.warnings:
                print(f"warning: {args.file}: {warning}", file=sys.stderr)
    if node is not None:
        print(f"{args.node}: valid node config (role {node.role})")
    if job is not None and node is not None:
        print(f"{args.file} with {args.node}: compatible")
    return 0


def container_problems(job: JobConfig) -> list[tuple[str, str]]:
    """The host paths a trainer in a pyxis container would not see (schema.container_path_problems), with
    run_dir resolved as `submit` from here resolves it: symbolic links followed, as the scripts name it."""
    run_dir = Path(job.run_dir or f"runs/{job.name}").resolve()
    return container_path_problems(job, str(run_dir), on_host=os.path.isdir)


def _hang_rule(job: JobConfig) -> str:
    from lamplighter.configs.hang_rule import pace_rule

    return pace_rule(job.health).describe()


def _lighthouse_place(job: JobConfig) -> str:
    lh = job.lighthouse
    port = lh.port or "a free port"
    if lh.host is not None:
        return f"{lh.host}:{port}"
    if job.placement == "slurm":
        node = job.slurm.head_node or f"any node of partition {job.slurm.lighthouse_partition or job.slurm.partition}"
        return f"the address of its node ({node}), port {port}"
    return f"{lh.local_host}:{port}"


def summary(job: JobConfig, source: str) -> str:
    g, lh, ft = job.groups, job.lighthouse, job.torchft
    return "\n".join(
        [
            f"{source}: valid job '{job.name}'",
            f"  groups      {g.count} x {g.nodes} node(s) x {g.nproc_per_node} process(es), {g.gpus_per_node} GPU(s)/node",
            f"  lighthouse  {_lighthouse_place(job)}  min_replicas={lh.min_replicas}  heartbeat_timeout={lh.heartbeat_timeout_ms}ms"
            f"  join_timeout={lh.join_timeout_ms}ms  tick={lh.quorum_tick_ms}ms",
            f"  torchft     pg_timeout={ft.pg_timeout_s}s  timeout={ft.timeout_s}s  quorum_timeout={ft.quorum_timeout_s}s"
            f"  hang_timeout={job.health.hang_timeout_s}s",
            f"  hangs       a group is {_hang_rule(job)}",
            f"  trainer     {' '.join(job.trainer.command) if job.trainer.command else 'reference trainer'}"
            f"  to step {job.trainer.steps}",
            f"  run_dir     {job.run_dir or 'runs/' + job.name}",
        ]
    )
