"""Render a job's sbatch scripts: one per replica group, one for the Lighthouse.

Two quoting worlds meet in an sbatch script:
- The body is bash: every interpolated value goes through `shlex.quote`.
- `#SBATCH` lines are read by sbatch itself, not by a shell. sbatch splits
  them at whitespace and honours "..." and '...' but expands nothing, and a
  backslash in an output path switches off Slurm's %j patterns. So values
  there are written inside double quotes, and lamplighter refuses any value
  holding a double quote, a backslash or a line break (`sbatch_value`).
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from lamplighter.configs.schema import JobConfig
from lamplighter.supervisor.lighthouse import lighthouse_argv
from lamplighter.trainer import contract
from lamplighter.trainer.adapter import job_run_dir, render_command, trainer_env

CONFIG_FILE = "job.json"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BAD_IN_SBATCH = set('"\\\n\r\x00')
# Runs in every task: derive the torch.distributed variables from Slurm's.
# A constant (no interpolated value); the trainer argv follows as "$@".
TASK_WRAPPER = (
    'export RANK="$SLURM_PROCID" WORLD_SIZE="$SLURM_NTASKS" LOCAL_RANK="$SLURM_LOCALID" '
    'GROUP_RANK="$SLURM_NODEID"; exec "$@"'
)
# Group rank 0 hosts the group's TCPStore here; the job id keeps concurrent groups
# on one host apart, and the range stays below Linux's ephemeral ports (32768+).
MASTER_PORT_EXPR = "$((30000 + SLURM_JOB_ID % 2000))"


class RenderError(ValueError):
    """A job cannot be turned into sbatch scripts; names the job and the value."""


def sbatch_value(value: str, what: str) -> str:
    """A value for an `#SBATCH --opt="value"` line, refused if sbatch could misread it."""
    bad = sorted(_BAD_IN_SBATCH & set(value))
    if bad:
        raise RenderError(f"{what} {value!r} cannot go into an #SBATCH line: it contains {bad!r}")
    return f'"{value}"'


def slurm_path_pattern(path: str) -> str:
    """A literal path for --output, with Slurm's filename patterns (%) escaped."""
    return path.replace("%", "%%")


def lighthouse_url(job: JobConfig) -> str:
    host = job.lighthouse.host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{job.lighthouse.port}"


def group_job_name(job: JobConfig, replica_id: int) -> str:
    return f"ll-{job.name}-g{replica_id}"


def lighthouse_job_name(job: JobConfig) -> str:
    return f"ll-{job.name}-lighthouse"


@dataclass(frozen=True)
class RenderPaths:
    """Absolute places a rendered job refers to."""

    run_dir: Path
    config: Path
    logs: Path


def resolve_paths(job: JobConfig, base: Path | None = None) -> RenderPaths:
    """The run directory made absolute (jobs run elsewhere than where they were submitted)."""
    run_dir = Path(job_run_dir(job))
    if not run_dir.is_absolute():
        run_dir = (base or Path.cwd()) / run_dir
    run_dir = Path(str(run_dir.resolve()))
    return RenderPaths(run_dir, run_dir / CONFIG_FILE, contract.RunPaths(run_dir).logs())


def _sbatch_header(job: JobConfig, name: str, nodes: int, tasks_per_node: int, output: str, requeue: bool) -> list[str]:
    s = job.slurm
    lines = [
        f"#SBATCH --job-name={sbatch_value(name, 'job name')}",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={tasks_per_node}",
        "#SBATCH --requeue" if requeue else "#SBATCH --no-requeue",
        # Append: a requeued job keeps the log of its earlier runs.
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={sbatch_value(output, 'log path (run_dir)')}",
    ]
    for opt, val in (
        ("partition", s.partition),
        ("account", s.account),
        ("time", s.time),
        ("qos", s.qos),
        ("constraint", s.constraint),
    ):
        if val is not None:
            lines.append(f"#SBATCH --{opt}={sbatch_value(val, 'slurm.' + opt)}")
    if s.exclusive:
        lines.append("#SBATCH --exclusive")
    for extra in s.extra_sbatch:
        opt, eq, val = extra.partition("=")
        lines.append(f"#SBATCH {opt}={sbatch_value(val, 'slurm.extra_sbatch ' + opt)}" if eq else f"#SBATCH {opt}")
    return lines


def render_group_script(job: JobConfig, replica_id: int, paths: RenderPaths, python: str) -> str:
    """The sbatch script of one replica group: srun of the trainer on each of its nodes."""
    g = job.groups
    lh = lighthouse_url(job)
    argv = render_command(job, replica_id=replica_id, lighthouse=lh, config_path=str(paths.config), python=python)
    env = trainer_env(
        job, replica_id=replica_id, attempt=0, lighthouse=lh, config_path=str(paths.config), run_dir=str(paths.run_dir)
    )
    output = slurm_path_pattern(str(paths.logs)) + f"/g{replica_id}-%j.out"
    header = _sbatch_header(job, group_job_name(job, replica_id), g.nodes, g.nproc_per_node, output, job.slurm.requeue)
    if g.gpus_per_node:
        header.append(f"#SBATCH --gpus-per-node={g.gpus_per_node}")
    exports = []
    for key, val in env.items():
        if not _ENV_NAME.fullmatch(key):
            raise RenderError(f"job {job.name}: environment name {key!r} is not valid")
        if key == contract.ENV_ATTEMPT:
            continue
        exports.append(f"export {key}={shlex.quote(val)}")
    cmd = " \\\n    ".join(shlex.quote(a) for a in argv)
    return "\n".join(
        [
            "#!/bin/bash",
            f"# lamplighter job {job.name}: replica group {replica_id} of {g.count}.",
            "# Rendered by `lamplighter render`; edit the job's YAML, not this file.",
            "#",
            "# #SBATCH lines are read by sbatch, not bash: no expansion happens there, values",
            "# sit in double quotes and lamplighter refuses any with a quote, backslash or newline.",
            *header,
            "",
            "set -euo pipefail",
            "",
            "# The trainer's environment (lamplighter's contract, torchft settings, trainer.env).",
            *exports,
            "# Slurm counts restarts of a requeued job; unset on the first run.",
            f'export {contract.ENV_ATTEMPT}="${{SLURM_RESTART_COUNT:-0}}"',
            "",
            "# Rendezvous inside the group: this script runs on the group's first node.",
            'export MASTER_ADDR="$(hostname)"',
            *(
                [
                    "# One process: it picks a free port itself (no clash with other jobs on this node).",
                    'export MASTER_PORT="0"',
                ]
                if g.nodes * g.nproc_per_node == 1
                else [
                    "# Every rank must know the port before rank 0 binds it: derived from the job id, so two",
                    "# jobs on one node clash only if their ids differ by a multiple of 2000.",
                    f'export MASTER_PORT="{MASTER_PORT_EXPR}"',
                ]
            ),
            "# torchrun as the trainer command (one per node) reads its c10d rendezvous endpoint from here.",
            'export PET_RDZV_ENDPOINT="$MASTER_ADDR:$MASTER_PORT"',
            "",
            f"# One task per process on each of the group's {g.nodes} node(s); a dead task ends the step,",
            "# so a broken group fails as a whole and lamplighter can requeue it.",
            f"exec srun --kill-on-bad-exit=1 bash -c {shlex.quote(TASK_WRAPPER)} lamplighter-task \\",
            f"    {cmd}",
            "",
        ]
    )


def lighthouse_bin(python: str) -> str:
    """torchft_lighthouse next to the interpreter (the venv's), else from PATH."""
    cand = Path(python).parent / "torchft_lighthouse"
    return str(cand) if cand.exists() else "torchft_lighthouse"


def render_lighthouse_script(job: JobConfig, paths: RenderPaths, python: str) -> str:
    """The sbatch script of the Lighthouse, pinned to slurm.head_node when given."""
    lh = job.lighthouse
    if lh.port == 0:
        raise RenderError(f"job {job.name}: lighthouse.port 0 (pick a free port) works in local mode only")
    header = _sbatch_header(
        job, lighthouse_job_name(job), 1, 1, slurm_path_pattern(str(paths.logs)) + "/lighthouse-%j.out", requeue=True
    )
    if job.slurm.head_node:
        header.append(f"#SBATCH --nodelist={sbatch_value(job.slurm.head_node, 'slurm.head_node')}")
    argv = lighthouse_argv(lh, lh.port, [lighthouse_bin(python)], bind_host="[::]")
    return "\n".join(
        [
            "#!/bin/bash",
            f"# lamplighter job {job.name}: the torchft Lighthouse, which forms the quorum of live groups.",
            "# Rendered by `lamplighter render`; edit the job's YAML, not this file.",
            "# #SBATCH lines are read by sbatch, not bash (see the group scripts).",
            *header,
            "",
            "set -euo pipefail",
            f"exec {' '.join(shlex.quote(a) for a in argv)}",
            "",
        ]
    )


def render_job(job: JobConfig, out_dir: Path, *, python: str | None = None, base: Path | None = None) -> list[Path]:
    """Write the Lighthouse script (if it runs as a Slurm job) and one script per group into out_dir.

    Also writes the resolved config (absolute run_dir) to `<run_dir>/job.json`,
    the file the trainer reads through LAMPLIGHTER_CONFIG, and creates the log
    folder (sbatch does not create the folder of --output).
    """
    py = python or sys.executable
    paths = resolve_paths(job, base)
    resolved = job.model_copy(update={"run_dir": str(paths.run_dir)})
    scripts: list[tuple[str, str]] = []
    if job.lighthouse.placement == "slurm-job":
        scripts.append(("lighthouse.sbatch", render_lighthouse_script(resolved, paths, py)))
    for rid in range(job.groups.count):
        scripts.append((f"group-{rid}.sbatch", render_group_script(resolved, rid, paths, py)))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths.logs.mkdir(parents=True, exist_ok=True)
    contract.write_json_atomic(paths.config, resolved.model_dump(mode="json"))
    written = []
    for name, text in scripts:
        p = out_dir / name
        p.write_text(text)
        p.chmod(0o755)
        written.append(p)
    return written
