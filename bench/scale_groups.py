"""The job `make scale` runs on its Slurm lab: one lamplighter job of N replica groups, one per compute node.

Submitted by a throwaway user with `lamplighter submit`, as a cluster's users submit theirs: its own
Lighthouse job on the head node, and N group jobs whose batch scripts run the in-job agent, which starts
the trainer step. The trainer is lab/scale_replica.py: torch-free, it speaks torchft's own protocol
through torchft's native module (a Manager server heartbeating to the Lighthouse, a quorum and a
should_commit every step), so that 64 groups fit on this machine (about 40 MB a replica, against 230 MB
and a CPU each for the reference trainer). The node daemons read each group's progress from the
Lighthouse (health.progress: lighthouse), as they would a real torchft trainer's, so a hang is seen as on
a cluster. What a replica leaves out (collectives, process groups, weights) is in its own docstring.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from bench.jobspec import REPO
from lamplighter.bare.accounts import Account
from lamplighter.lab.slurm_lab import SlurmLab

JOB = "scale"
STEP_S = 1.0  # a replica's step
HANG_TIMEOUT_S = 12.0  # above torchft's longest wait here (the quorum's 10 s), as validate requires


def job_config(run_dir: Path, groups: int, head: str, head_address: str, port: int, slurm_conf: Path) -> dict[str, Any]:
    """One group per compute node (never the head), its Lighthouse job on the head, on the head's address."""
    return {
        "name": JOB,
        "run_dir": str(run_dir),
        "trainer": {
            "command": ["{python}", "-m", "lamplighter.lab.scale_replica", "--groups", "{replica_id}"]
            + ["--step-s", str(STEP_S)],
        },
        "groups": {"count": groups, "nodes": 1},
        # Reached from every node's namespace: the head node's own address, not loopback.
        "lighthouse": {"host": head_address, "port": port, "join_timeout_ms": 3000},
        "slurm": {
            "requeue": True,
            "exclusive": True,
            "extra_sbatch": [f"--exclude={head}"],
            "slurm_conf": str(slurm_conf),
            "time": "01:00:00",
            "head_node": head,
            "renewal": {"enabled": False},  # runs of minutes, far from the time limit
        },
        "health": {"progress": "lighthouse", "hang_timeout_s": HANG_TIMEOUT_S, "startup_timeout_s": 300},
        # Every failure is the node daemon's to act on: what the bench times.
        "restart": {"in_job": 0, "budget_per_group": 5},
    }


def user_python() -> Path:
    """The job's interpreter (make's build/user-venv): the user runs `lamplighter submit` with it, so the
    Lighthouse, the agents and the replicas run with it too."""
    python = REPO / "build" / "user-venv" / "bin" / "python"
    if not (python.parent.parent / ".installed").exists():
        raise RuntimeError(
            f"no {python.parent.parent}: `make scale-slurm-rpc` builds it (make build/user-venv/.installed)"
        )
    return python


def submit(lab: SlurmLab, user: Account, folder: Path, groups: int) -> dict[int, str]:
    """Submit the job as `user` (its run directory the user's own); group -> Slurm job id."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chown(folder, user.uid, user.gid)
    config = folder / "job.yaml"
    head = lab.head
    cfg = job_config(folder / "run", groups, head, lab.cluster.node_address(head), lab.job_port, lab.cluster.conf_path)
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    os.chown(config, user.uid, user.gid)
    python = user_python()
    env = {**os.environ, "SLURM_CONF": str(lab.cluster.conf_path), "HOME": str(folder)}
    argv = ["runuser", "-u", user.name, "--", str(python), "-m", "lamplighter", "submit", str(config), "--json"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=folder, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"lamplighter submit as {user.name}: exit {out.returncode}: {out.stderr.strip()[-800:]}")
    return {int(g): str(j) for g, j in json.loads(out.stdout)["groups"].items()}
