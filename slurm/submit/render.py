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

from lamplighter.configs import slurm_names
from lamplighter.configs.job_file import job_file_doc
from lamplighter.configs.schema import JobConfig
from lamplighter.lighthouse.main import CANNOT_LISTEN
from lamplighter.lighthouse.spawn import lighthouse_argv
from lamplighter.rundir import contract
from lamplighter.slurm.injob.renew import RENEWAL_DIR, renewals_file
from lamplighter.trainer.adapter import job_run_dir, render_command, trainer_env
from lamplighter.trainer.boot_copy import install_boot

CONFIG_FILE = "job.json"
AGENT_MODULE = "lamplighter.slurm.injob.agent"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BAD_IN_SBATCH = set('"\\\n\r\x00')
# Runs in every task: derive the torch.distributed variables from Slurm's.
# A constant (no interpolated value); the trainer argv follows as "$@", after the wrapper's $0
# (TASK_MARK, where the in-job agent finds the trainer's argv in the step's command).
TASK_WRAPPER = (
    'export RANK="$SLURM_PROCID" WORLD_SIZE="$SLURM_NTASKS" LOCAL_RANK="$SLURM_LOCALID" '
    'GROUP_RANK="$SLURM_NODEID"; exec "$@"'
)
# Group rank 0 hosts the group's TCPStore here, and every rank must know the port before rank 0 binds it:
# from the job id, or else one nothing on this node listens on (two jobs here whose ids differ by a multiple
# of 2000 got the same one, and a torchrun that finds its port taken joins the other job's store as a client
# and dies with it: seen when two test clusters shared a host). The next try is 997 ports on, not the next
# port: that is the next job id's, a sibling group that may not have bound it yet (seen in CI too). 997 is
# prime to 2000, so every port is tried once. The range stays below Linux's ephemeral ports (32768+). The
# script runs on the group's first node, where rank 0 runs.
MASTER_PORT_LINES = (
    'MASTER_PORT="$((30000 + SLURM_JOB_ID % 2000))"',
    "for _ in {1..2000}; do",
    '  (: <>"/dev/tcp/$MASTER_ADDR/$MASTER_PORT") 2>/dev/null || break  # nobody listens: ours',
    '  MASTER_PORT="$((30000 + (MASTER_PORT - 30000 + 997) % 2000))"',
    "done",
    "export MASTER_PORT",
)
TASK_MARK = "lamplighter-task"
LISTEN_TRIES = 5  # a Lighthouse that cannot listen this many times in a row (about 7 s) ends its job


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


def lighthouse_url(job: JobConfig) -> str | None:
    """The Lighthouse's address when the config fixes it (host and port given); else it is known only once the
    Lighthouse job has bound the address of its node and published it in <run_dir>/lighthouse.json."""
    host = job.lighthouse.host
    if host is None or job.lighthouse.port == 0:
        return None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{job.lighthouse.port}"


def group_job_name(job: JobConfig, replica_id: int) -> str:
    return slurm_names.group_job_name(job.name, replica_id)


def lighthouse_job_name(job: JobConfig) -> str:
    return slurm_names.lighthouse_job_name(job.name)


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


def sbatch_header(job: JobConfig, name: str, nodes: int, tasks_per_node: int, output: str, requeue: bool) -> list[str]:
    """The #SBATCH lines of one of the job's scripts (also the benchmark's baselines': the same allocation)."""
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


def renew_argv(job: JobConfig, paths: RenderPaths, python: str, role: list[str]) -> list[str]:
    """How a job's script calls the renewal helper (lamplighter's own interpreter: it needs no torch)."""
    argv = [python, "-m", "lamplighter.slurm.injob.renew", *role, "--run-dir", str(paths.run_dir)]
    if job.slurm.slurm_conf:
        argv += ["--slurm-conf", job.slurm.slurm_conf]
    return argv


def _renewal_lines(renew: list[str], warning_s: int, what: list[str]) -> list[str]:
    return [
        f'# Renewal (docs/torchft.md, "Time limits"): Slurm sends USR1 to this script {warning_s} s before its time',
        "# limit (Slurm checks limits every 30 s, so 30-60 s earlier still). The helper then",
        *(f"# {line}" for line in what),
        "# It runs in the background: if the step ends meanwhile, this script ends with it (and stops it).",
        "renew() {",
        '    [[ -z "${renew_pid:-}" ]] || return 0',
        f"    {' '.join(shlex.quote(a) for a in renew)} &",
        "    renew_pid=$!",
        "}",
        "trap renew USR1",
        """trap '[[ -z "${renew_pid:-}" ]] || kill "$renew_pid" 2>/dev/null || true' EXIT""",
    ]


# Runs the step in the background so the USR1 trap can run while it trains; `wait` returns early
# when a trapped signal arrives, so wait again until srun itself has ended (then `wait` gives its status).
WAIT_FOR_STEP = [
    "step=$!",
    'while kill -0 "$step" 2>/dev/null; do wait "$step" || true; done',
]


def render_group_script(
    job: JobConfig, replica_id: int, paths: RenderPaths, python: str, helpers: str | None = None
) -> str:
    """The sbatch script of one replica group: srun of the trainer on each of its nodes.

    `python`: the trainer's {python} (unless trainer.python); `helpers`: the in-job agent's and the renewal
    helper's interpreter (default `python`)."""
    helpers = helpers or python
    g, s = job.groups, job.slurm
    lh = lighthouse_url(job)
    if lh is None and any("{lighthouse}" in a for a in job.trainer.command or []):
        raise RenderError(
            f"job {job.name}: trainer.command uses {{lighthouse}}, but the Lighthouse's address is known only when "
            "its job starts (lighthouse.port 0, or no lighthouse.host: it binds the address of the node it lands "
            "on): read TORCHFT_LIGHTHOUSE from the environment, or set lighthouse.host and lighthouse.port"
        )
    argv = render_command(job, replica_id=replica_id, lighthouse=lh or "", config_path=str(paths.config), python=python)
    env = trainer_env(
        job,
        replica_id=replica_id,
        attempt=0,
        lighthouse=lh or "",
        config_path=str(paths.config),
        run_dir=str(paths.run_dir),
        boot_dir=str(contract.RunPaths(paths.run_dir).boot()),  # submit copies the launch there
    )
    env.pop("TORCHFT_LIGHTHOUSE")
    output = slurm_path_pattern(str(paths.logs)) + f"/g{replica_id}-%j.out"
    header = sbatch_header(job, group_job_name(job, replica_id), g.nodes, g.nproc_per_node, output, s.requeue)
    if g.gpus_per_node:
        header.append(f"#SBATCH --gpus-per-node={g.gpus_per_node}")
    if s.cpus_per_task:
        header.append(f"#SBATCH --cpus-per-task={s.cpus_per_task}")
    renewal: list[str] = []
    renewals_export: list[str] = []
    if s.renews:
        count = renewals_file(paths.run_dir / RENEWAL_DIR, replica_id, 0)
        prefix = shlex.quote(str(count.with_name(f"g{replica_id}-")))
        renewals_export = [
            "# How many of them were renewals before the time limit, not failures (slurm/injob/renew.py).",
            f'export {contract.ENV_RENEWALS}="$(cat {prefix}"$SLURM_JOB_ID.renewals" 2>/dev/null || echo 0)"',
        ]
        warning = s.renewal.warning_s(replica_id, g.count)
        header.append(f"#SBATCH --signal=B:USR1@{warning}")
        # The helper reads the Lighthouse's address where the job's Lighthouse published it.
        role = ["--group", str(replica_id), "--groups", str(g.count)]
        renewal = [
            *_renewal_lines(
                renew_argv(job, paths, helpers, role),
                warning,
                [
                    "waits until every other group is live in the quorum (at the latest until shortly before",
                    "the limit) and requeues this job: it starts again with a fresh time limit and heals from",
                    "the others, one group at a time.",
                ],
            ),
            "",
        ]
    srun = ["srun", "--kill-on-bad-exit=1"]
    if s.cpus_per_task:
        srun.append(f"--cpus-per-task={s.cpus_per_task}")
    srun += s.srun_args
    exports = []
    for key, val in env.items():
        if not _ENV_NAME.fullmatch(key):
            raise RenderError(f"job {job.name}: environment name {key!r} is not valid")
        if key == contract.ENV_ATTEMPT:
            continue
        exports.append(f"export {key}={shlex.quote(val)}")
    cmd = " \\\n    ".join(shlex.quote(a) for a in argv)
    # srun's own options on its line, each extra one (a container's) on a line of its own.
    launch = " \\\n    ".join(
        [
            " ".join(shlex.quote(a) for a in srun[: len(srun) - len(s.srun_args)]),
            *(shlex.quote(a) for a in s.srun_args),
            f"bash -c {shlex.quote(TASK_WRAPPER)} {TASK_MARK} \\",
        ]
    )
    agent = [helpers, "-m", AGENT_MODULE, "--run-dir", str(paths.run_dir), "--group", str(replica_id)]
    agent += ["--config", str(paths.config)]
    if lh is not None:
        agent += ["--lighthouse", lh]
    if s.spare:
        agent.append("--spare")
    if s.slurm_conf:
        agent += ["--slurm-conf", s.slurm_conf]
    if s.srun_args:
        srun_note = ["# slurm.srun_args (e.g. a container) apply to the trainer step only, not to this script."]
    else:
        srun_note = []
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
            *(
                [
                    "# PYTHONPATH starts with <run_dir>/boot: `lamplighter submit` copies lamplighter's torchtitan",
                    "# launch there (a container sees the run dir it mounts, never lamplighter's install; `render`",
                    "# copies nothing).",
                ]
                if job.trainer.resolved_kind == "torchtitan"
                else []
            ),
            *exports,
            *renewals_export,
            "",
            "# Rendezvous inside the group: this script runs on the group's first node.",
            'export MASTER_ADDR="$(hostname)"',
            *(
                [
                    "# One process: it picks a free port itself (no clash with other jobs on this node).",
                    'export MASTER_PORT="0"',
                ]
                if g.nodes * g.nproc_per_node == 1 and job.trainer.resolved_kind != "torchtitan"
                else [
                    "# Every rank must know the port before rank 0 binds it: from the job id, or the next free one.",
                    *MASTER_PORT_LINES,
                ]
            ),
            "# torchrun as the trainer command (one per node) reads its c10d rendezvous endpoint from here.",
            'export PET_RDZV_ENDPOINT="$MASTER_ADDR:$MASTER_PORT"',
            "",
            *renewal,
            "# The in-job agent (slurm/injob/agent.py), as this job's user, inside this allocation: it reads where",
            "# this job's own Lighthouse listens (this job starts after the Lighthouse job, and waits for it to",
            "# publish: a group never joins another job's quorum), starts the trainer step below (one task per process on each of the",
            f"# group's {g.nodes} node(s); a dead task ends the step), keeps a warm spare step beside it with",
            "# slurm.spare, and restarts a failed trainer inside the allocation (restart.in_job); past that, or",
            "# on exit 78, it ends the job with the trainer's status and the node daemon requeues it. A trainer's",
            "# 0 completes the job (<run_dir>/completed), unless this run is one Slurm has moved on from.",
            *srun_note,
            " ".join(shlex.quote(a) for a in agent) + " \\",
            "    -- " + launch,
            f"    {cmd} &",
            *WAIT_FOR_STEP,
            "rc=0",
            'wait "$step" || rc=$?',
            'exit "$rc"',
            "",
        ]
    )


def render_lighthouse_script(job: JobConfig, paths: RenderPaths, python: str) -> str:
    """The sbatch script of the job's own Lighthouse, pinned to slurm.head_node when given.

    The Lighthouse runs without importing torch (lighthouse/main.py: ~0.1 s to start) and publishes its
    address in the run directory. If it dies, the script starts it again at once on the same port, so the
    groups' quorum retries ride through it. The script ends once every group job has left the queue
    (slurm/submit/release.py) or on `lamplighter cancel`.
    """
    lh = job.lighthouse
    if job.slurm.head_node:
        # Its node is named: an --exclude meant for the groups (keep them off the head) would contradict it.
        kept = [e for e in job.slurm.extra_sbatch if not e.startswith("--exclude")]
        job = job.model_copy(update={"slurm": job.slurm.model_copy(update={"extra_sbatch": kept})})
    # Its own limit, partition, account, qos and features (never the groups' GPU features by default), and never
    # a whole node: other jobs' Lighthouses share the head node.
    s = job.slurm
    job = job.model_copy(
        update={
            "slurm": s.model_copy(
                update={
                    "time": s.lighthouse_limit,
                    "exclusive": False,
                    "partition": s.lighthouse_partition or s.partition,
                    "account": s.lighthouse_account or s.account,
                    "qos": s.lighthouse_qos or s.qos,
                    "constraint": s.lighthouse_constraint,
                }
            )
        }
    )
    header = sbatch_header(
        job, lighthouse_job_name(job), 1, 1, slurm_path_pattern(str(paths.logs)) + "/lighthouse-%j.out", requeue=True
    )
    if job.slurm.head_node:
        header.append(f"#SBATCH --nodelist={sbatch_value(job.slurm.head_node, 'slurm.head_node')}")
    run_paths = contract.RunPaths(paths.run_dir)
    # Bound to one address, never a wildcard: torchft's Lighthouse has no authentication, and its dashboard
    # kills replicas (deploy/SECURITY.md). By default the address of the node Slurm put it on, found there.
    argv = lighthouse_argv(
        lh,
        lh.port,
        [python, "-m", "lamplighter.lighthouse.main"],
        remember=run_paths.lighthouse_memory(),
        on_its_node=lh.host is None,
    )
    argv += ["--publish", str(contract.RunPaths(paths.run_dir).lighthouse())]
    argv += [] if lh.host is None else ["--advertise", lh.host]
    argv += ["--record-steps", str(contract.RunPaths(paths.run_dir).lighthouse_steps())]
    # Restarted at once if it dies, on the port it published (the groups keep their address). One that cannot
    # listen (an address of another machine, a port taken) ends its job after a few tries: no restart loop.
    loop = [
        "cannot_listen=0",
        "while true; do",
        f"    {' '.join(shlex.quote(a) for a in argv)}",
        "    rc=$?",
        f'    if [ "$rc" -eq {CANNOT_LISTEN} ]; then cannot_listen=$((cannot_listen + 1)); else cannot_listen=0; fi',
        f'    if [ "$cannot_listen" -ge {LISTEN_TRIES} ]; then',
        '        echo "lamplighter: the Lighthouse cannot listen (its line above says why); ending its job" >&2',
        '        kill -USR2 "$$"',
        "        exit 1",
        "    fi",
        '    echo "lamplighter: the Lighthouse exited ($rc); starting it again" >&2',
        '    sleep "$cannot_listen.2"',
        "done",
    ]
    release = [python, "-m", "lamplighter.slurm.submit.release", "--run-dir", str(paths.run_dir)]
    if job.slurm.slurm_conf:
        release += ["--slurm-conf", job.slurm.slurm_conf]
    renewal: list[str] = []
    if job.slurm.renews:
        warning = job.slurm.renewal.lighthouse_warning_s(job.groups.count)
        header.append(f"#SBATCH --signal=B:USR1@{warning}")
        renewal = _renewal_lines(
            renew_argv(job, paths, python, ["--lighthouse-job"]),
            warning,
            [
                "requeues this job at once: it renews before any group, and the groups ride through its",
                "restart on torchft.quorum_retries (it comes back on the port it published).",
            ],
        )
    body = [
        *renewal,
        "# The loop below says USR2 when its Lighthouse cannot listen: the job ends then, not at its limit.",
        "gave_up=",
        "trap 'gave_up=1' USR2",
        "(",
        *(f"    {line}" for line in loop),
        ") &",
        "lighthouse_loop=$!",
        "# The job ends itself (no release job: it would need a CPU beside this one on the head node):",
        "# the helper returns once every group job of this submission has left the queue.",
        f"{' '.join(shlex.quote(a) for a in release)} &",
        "step=$!",
        'while kill -0 "$step" 2>/dev/null && [ -z "$gave_up" ]; do wait "$step" || true; done',
        'if [ -n "$gave_up" ]; then kill "$step" 2>/dev/null; rc=1; else wait "$step"; rc=$?; fi',
        'children=$(pgrep -P "$lighthouse_loop" || true)',
        'kill "$lighthouse_loop" $children 2>/dev/null || true',
        'exit "$rc"',
    ]
    return "\n".join(
        [
            "#!/bin/bash",
            f"# lamplighter job {job.name}: the job's own torchft Lighthouse, which forms the quorum of live groups.",
            "# Rendered by `lamplighter render`; edit the job's YAML, not this file.",
            "# #SBATCH lines are read by sbatch, not bash (see the group scripts).",
            *header,
            "",
            "set -uo pipefail",
            *body,
            "",
        ]
    )


def helper_python(job: JobConfig, python: str | None = None) -> str:
    """The interpreter of the helpers in the scripts: slurm.helper_python, else `python`, else this one."""
    return job.slurm.helper_python or python or sys.executable


def write_run_files(job: JobConfig, base: Path | None = None) -> RenderPaths:
    """What the scripts need in the run directory: the resolved config (absolute run_dir) in
    `<run_dir>/job.json`, the file the trainer reads through LAMPLIGHTER_CONFIG, and the log folder
    (sbatch does not create the folder of --output). `submit` writes them; `render` does not."""
    paths = resolve_paths(job, base)
    paths.logs.mkdir(parents=True, exist_ok=True)
    resolved = job.model_copy(update={"run_dir": str(paths.run_dir)})
    contract.write_json_atomic(paths.config, job_file_doc(resolved))  # configs/job_file.py: versioned
    return paths


def render_job(
    job: JobConfig,
    out_dir: Path,
    *,
    python: str | None = None,
    base: Path | None = None,
    run_files: bool = True,
) -> list[Path]:
    """Write the Lighthouse script and one script per group into out_dir.

    With `run_files` (what submitting needs) also write_run_files; `lamplighter render` passes False and
    touches nothing outside out_dir. `python`: the trainer's {python} and, without slurm.helper_python,
    the helpers' interpreter (default: this one).
    """
    py = python or sys.executable
    helpers = helper_python(job, python)
    paths = resolve_paths(job, base)
    resolved = job.model_copy(update={"run_dir": str(paths.run_dir)})
    scripts: list[tuple[str, str]] = [("lighthouse.sbatch", render_lighthouse_script(resolved, paths, helpers))]
    for rid in range(job.groups.count):
        scripts.append((f"group-{rid}.sbatch", render_group_script(resolved, rid, paths, py, helpers)))
    out_dir.mkdir(parents=True, exist_ok=True)
    if run_files:
        write_run_files(job, base)
        if job.trainer.resolved_kind == "torchtitan":
            install_boot(paths.run_dir)  # what the trainers' PYTHONPATH names (trainer/boot_copy.py)
    written = []
    for name, text in scripts:
        p = out_dir / name
        p.write_text(text)
        p.chmod(0o755)
        written.append(p)
    return written
