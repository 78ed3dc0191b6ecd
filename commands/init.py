"""`lamplighter init`: a commented starting job file, valid as written (`lamplighter validate` passes).

Two kinds of job:
  --torchtitan   torchtitan 0.3 with per-step fault tolerance (torchft's HSDP: every
                 step's gradients are averaged across the replica groups that are up),
                 launched by torchrun in each group, e.g. from a ROCm container
  --custom       your own torchft trainer (it builds torchft's Manager itself)

Lines marked `# CHANGE` hold values of the example cluster (partition, nodes,
paths, container image): put yours there. The rest are defaults that suit
most jobs, each with a word on why. Then:
  lamplighter validate job.yaml
  lamplighter render job.yaml --out sbatch/      # read the scripts it would submit
  lamplighter submit job.yaml
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

EXIT_INVALID = 2
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")

TORCHTITAN = """\
# A torchtitan 0.3 job on Slurm, supervised by lamplighter (`lamplighter init --torchtitan`).
# Per-step fault tolerance: each replica group is one Slurm job (requeued alone when it fails);
# the groups that are up average every step's gradients through torchft, and a group that comes
# back heals from a live peer's weights and optimizer state, without a checkpoint.
#
# lamplighter appends torchtitan's fault-tolerance flags from this file (never type them in
# trainer.command): --fault_tolerance.enable/.replica_id/.group_size/.min_replica_size/
# .process_group/.process_group_timeout_ms, --training.steps, the per-step dataloader checkpoint
# and --dump_folder. `lamplighter render job.yaml --out sbatch/` shows the scripts.
name: @NAME@
run_dir: /shared/runs/@NAME@          # CHANGE: on storage every node and the login node share
trainer:
  kind: torchtitan
  python: python3                     # the container's interpreter (torchtitan 0.3 and torchft in it)
  # One torchrun per node (groups.procs_per_node: 1), one rank per GPU. Nothing here goes through a shell.
  command:
    - "{python}"
    - -m
    - torch.distributed.run
    - --nnodes={nnodes}
    - --nproc_per_node={gpus_per_node}
    - --rdzv_backend=c10d
    - --rdzv_id={job}-{replica_id}
    - -m
    - torchtitan.train
    - --module=llama3_8b_ft           # CHANGE: your torchtitan config module (on PYTHONPATH): `init` wrote
                                      # llama3_8b_ft.py beside this file (Llama 3 8B, FSDP2 in a group)...
    - --config=llama3_8b_ft           # CHANGE: ...and its config function
  env:
    PYTHONPATH: /shared/torchtitan    # CHANGE: where that config module lives
    NCCL_SOCKET_IFNAME: bond0         # CHANGE: the nodes' training interface (RCCL reads the NCCL_* names)
  steps: 100000                       # CHANGE: committed steps until the job is done
  backend: nccl                       # RCCL on ROCm
groups:
  count: 4                            # CHANGE: replica groups; a failure costs one group, not the job
  nodes: 2                            # CHANGE: nodes per group
  gpus_per_node: 8                    # CHANGE: MI300X/MI325X nodes have 8
  procs_per_node: 1                   # torchrun starts the ranks
lighthouse:
  # no host: it binds the address of the node Slurm runs it on (slurm.head_node) and publishes it
  port: 29510                         # fixed, so you can open http://head01:29510 and see the quorum
  min_replicas: 2                     # the smallest quorum that may train
  join_timeout_ms: 10000
  heartbeat_timeout_ms: 2000
torchft:
  pg_timeout_s: 60                    # a large allreduce across groups can take a while
  timeout_s: 120
  quorum_timeout_s: 180
  connect_timeout_s: 60
slurm:
  partition: mi325x                   # CHANGE
  account: my-account                 # CHANGE (or delete the line)
  time: "2-00:00:00"                  # CHANGE: groups renew themselves one at a time before this
  exclusive: true
  head_node: head01                   # CHANGE: the node the job's Lighthouse runs on (or delete: any node)
  # lighthouse_partition: service     # the Lighthouse job's own partition (default: the groups'; it never asks for their constraint)
  # helper_python: /shared/venvs/ll/bin/python3   # runs the Lighthouse (needs torchft on head_node) and the helpers; default: the submitting one
  cpus_per_task: 128                  # CHANGE: the node's cores (srun gets them too, for torchrun's ranks)
  srun_args:
    - --container-image=/shared/images/torchtitan-0.3-rocm.sqsh   # CHANGE: your image (pyxis/enroot)
    - --container-mounts=/shared:/shared                          # CHANGE
health:
  progress: auto                      # torchtitan writes no heartbeat files: progress comes from the Lighthouse
  hang_timeout_s: 600                 # above every torchft wait: a slow step is not a hang
  startup_timeout_s: 1200             # container start, model build, quorum and healing the weights
restart:
  budget_per_group: 20
  backoff_initial_s: 10
  backoff_max_s: 300
"""

CUSTOM = """\
# Your own torchft trainer on Slurm, supervised by lamplighter (`lamplighter init --custom`).
# Each replica group is one Slurm job, requeued alone when it fails; it heals from a live peer.
#
# What your trainer gets (each process's environment):
#   TORCHFT_LIGHTHOUSE      the job's Lighthouse, http://host:port: give it to torchft's Manager
#   REPLICA_GROUP_ID        this group's index, 0..count-1: the Manager's replica_id
#   NUM_REPLICA_GROUPS      groups.count
#   TORCHFT_*_TIMEOUT_SEC   torchft's timeouts from the torchft section below
# What it must do: train with torchft's Manager (its quorum, its allreduce, should_commit), exit 0
# once trainer.steps are committed, exit non-zero on an error (the group is then restarted). The
# node daemons read each group's progress from the Lighthouse: nothing else to write.
name: @NAME@
run_dir: /shared/runs/@NAME@          # CHANGE: on storage every node and the login node share
trainer:
  kind: custom
  python: /shared/venvs/train/bin/python   # CHANGE: the interpreter with torch and torchft
  command:
    - "{python}"
    - -m
    - torch.distributed.run
    - --nnodes={nnodes}
    - --nproc_per_node={gpus_per_node}
    - --rdzv_backend=c10d
    - --rdzv_id={job}-{replica_id}
    - /shared/code/train.py            # CHANGE: your training script...
    - --steps={steps}                  # CHANGE: ...and its arguments (placeholders: lamplighter validate --help)
  steps: 10000                         # CHANGE: committed steps until the job is done
  backend: nccl                        # RCCL on ROCm
groups:
  count: 3                             # CHANGE: replica groups
  nodes: 1                             # CHANGE: nodes per group
  gpus_per_node: 8                     # CHANGE
  procs_per_node: 1                    # torchrun starts the ranks
lighthouse:
  # no host: it binds the address of the node Slurm runs it on (slurm.head_node) and publishes it
  port: 29510
  min_replicas: 2                      # the smallest quorum that may train: 1 lets a group that starts first train alone
torchft:
  pg_timeout_s: 30
  timeout_s: 60
  quorum_timeout_s: 120
slurm:
  partition: gpu                       # CHANGE
  time: "1-00:00:00"                   # CHANGE: groups renew themselves one at a time before this
  head_node: head01                    # CHANGE: the node the job's Lighthouse runs on (or delete: any node)
  # lighthouse_partition: service      # the Lighthouse job's own partition (default: the groups'; it never asks for their constraint)
  # helper_python: /shared/venvs/ll/bin/python3   # runs the Lighthouse (needs torchft on head_node) and the helpers; default: the submitting one
  spare: true                          # a warm spare step per group, past `import torch`: a killed trainer trains again in 0.7 s instead of 3.8 s on the lab (bench/results/fault_cost.json); each spare rank holds about 300 MB of host memory
health:
  progress: auto                       # from the Lighthouse (and heartbeat files, if you write them)
  hang_timeout_s: 300                  # above every torchft wait above
  startup_timeout_s: 900
"""

TEMPLATES = {"torchtitan": TORCHTITAN, "custom": CUSTOM}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "init",
        help="write a commented starting job file (--torchtitan, or --custom for your own torchft trainer)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  lamplighter init --torchtitan > job.yaml\n"
        "  lamplighter init --torchtitan --name llama3-70b job.yaml\n"
        "  lamplighter init --custom --name my-run my-run.yaml\n\n"
        "--torchtitan with PATH also writes llama3_8b_ft.py, the torchtitan config module the job names,\n"
        "beside it.\n\n"
        "exit status: 0 written, 2 bad input (the file exists: --force)",
    )
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--torchtitan", dest="kind", action="store_const", const="torchtitan", help="a torchtitan job")
    kind.add_argument("--custom", dest="kind", action="store_const", const="custom", help="your own torchft trainer")
    p.add_argument("--name", default=None, help="the job's name (default: from PATH, else 'my-job')")
    p.add_argument("path", nargs="?", type=Path, default=None, help="write here instead of to stdout")
    p.add_argument("--force", action="store_true", help="overwrite PATH if it exists")
    p.set_defaults(func=run)


def job_file(kind: str, name: str) -> str:
    if not NAME.fullmatch(name):
        raise ValueError(f"job name {name!r}: letters, digits, '.', '_' and '-' only, at most 64")
    return TEMPLATES[kind].replace("@NAME@", name)


TORCHTITAN_MODULE = "llama3_8b_ft.py"  # configs/torchtitan/ in the package: the module the template names


def torchtitan_module() -> str:
    from importlib.resources import files

    return files("lamplighter.configs").joinpath("torchtitan", TORCHTITAN_MODULE).read_text()


def run(args: argparse.Namespace) -> int:
    name = args.name or (args.path.stem if args.path is not None else "my-job")
    try:
        text = job_file(args.kind, name)
    except ValueError as e:
        print(f"lamplighter init: error: {e}: give --name", file=sys.stderr)
        return EXIT_INVALID
    if args.path is None:
        sys.stdout.write(text)
        return 0
    if args.path.exists() and not args.force:
        print(f"lamplighter init: error: {args.path} exists: give --force to overwrite it", file=sys.stderr)
        return EXIT_INVALID
    module = args.path.parent / TORCHTITAN_MODULE
    if args.kind == "torchtitan" and module.exists() and not args.force:
        print(f"lamplighter init: error: {module} exists: give --force to overwrite it", file=sys.stderr)
        return EXIT_INVALID
    args.path.write_text(text)
    print(f"wrote {args.path}: change the lines marked CHANGE, then `lamplighter validate {args.path}`")
    if args.kind == "torchtitan":
        module.write_text(torchtitan_module())
        print(f"wrote {module}: the torchtitan config module it names; copy it to the trainer.env PYTHONPATH")
    return 0
