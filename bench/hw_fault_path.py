"""A GPU fault and a node crash, to the group running elsewhere, on the Slurm lab (#43 item 8).

The lab with a network namespace per node and SlurmdTimeout at Slurm's default (300 s), 3 compute nodes,
and one lamplighter job of 2 groups (bench/scale_groups.py's torch-free replicas, submitted by a
throwaway user): one compute node spare. Each round strikes the node group 0 runs on, once with a GPU's
uncorrectable ECC error (its daemon drains the node and moves the group) and once with a crash of the node
(the head moves the group); measured from the strike to lamplighter's first action on it (the action logs)
and to Slurm reporting group 0's job RUNNING on another node (squeue every 50 ms). The lab is made whole
between rounds, as an admin would. Writes bench/results/hw_fault_path.json.

    python -m bench.hw_fault_path [--rounds 5] [--dir build/hw-fault-path]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

from bench import scale_groups
from bench.results_io import spread, write_result
from bench.slurm_rpc_scale import all_in_quorum, first_action, make_whole
from lamplighter.gpusim.inject import inject as gpu_inject
from lamplighter.gpusim.state import StateDir
from lamplighter.lab.slurm_lab import LabSettings, running_lab
from lamplighter.lab.testcluster import wait_until
from lamplighter.lab.throwaway_user import throwaway_user
from lamplighter.slurm.run import SlurmCli, SlurmError
from lamplighter.supervisor.status_socket import StatusError, read_status

GROUPS = 2
COMPUTE = 3  # one spare for the struck group
GOALS_S = {"gpu_fault": 2.0, "node_crash": 5.0}  # #43 item 8, on the lab
GIVE_UP_S = 90.0  # a group not back by then is recorded as not back (None), and the round goes on
POLL_S = 0.05
FIRST_ACTIONS = {"gpu_fault": ("drain",), "node_crash": ("drain", "mark_down")}


def where(cli: SlurmCli, job_id: str) -> tuple[str, str]:
    """(state, nodes) of the job as squeue prints it."""
    state, _, nodes = cli.run("squeue", "--noheader", "-j", job_id, "-o", "%T|%N").strip().partition("|")
    return state, nodes


def running_elsewhere(cli: SlurmCli, job_id: str, struck: str, since: float) -> float | None:
    """Seconds from `since` until the job is RUNNING on a node other than `struck` (None: not in GIVE_UP_S)."""
    end = since + GIVE_UP_S
    while time.time() < end:
        try:
            state, nodes = where(cli, job_id)
        except SlurmError:
            state, nodes = "", ""
        if state == "RUNNING" and nodes and nodes != struck:
            return time.time() - since
        time.sleep(POLL_S)  # polling Slurm: what is measured is when it says so
    return None


def head_sees(lab: Any, since: float) -> None:
    """Returns once the head has read Slurm after `since`: it watches the nodes of the jobs running then (a
    group that moved a moment ago is otherwise unwatched for up to slurm_poll_s, which is not what a crash
    of a node that has trained for hours costs)."""

    def fresh() -> bool:
        try:
            at = read_status(lab.node_dir(lab.head) / "status.sock", timeout=5).get("slurm_read_at")
        except (StatusError, OSError):
            return False
        return isinstance(at, int | float) and at > since

    wait_until(fresh, 60, "the head's read of Slurm")


def strike(lab: Any, kind: str, node: str) -> None:
    if kind == "gpu_fault":
        gpu_inject(StateDir(lab.gpusim_root / node), 0, "ecc-uncorrectable")
    else:
        lab.cluster.crash_node(node)


def rounds(lab: Any, cli: SlurmCli, job_ids: dict[int, str], run_dir: Path, owner: int, n: int) -> list[dict[str, Any]]:
    out = []
    for r in range(n):
        for kind in ("gpu_fault", "node_crash"):
            wait_until(lambda: all_in_quorum(run_dir, owner, GROUPS), 300, f"both groups in one quorum ({kind})")
            _, node = where(cli, job_ids[0])
            head_sees(lab, time.time())
            t = time.time()
            strike(lab, kind, node)
            back = running_elsewhere(cli, job_ids[0], node, t)
            acted = first_action(lab, t, node, FIRST_ACTIONS[kind], 5.0)
            row = {"round": r + 1, "kind": kind, "node": node, "first_action_s": acted, "running_elsewhere_s": back}
            out.append(row)
            print(f"  round {r + 1}/{n} {kind} on {node}: acted {acted}, running elsewhere {back}", flush=True)
            make_whole(lab, cli, node if kind == "gpu_fault" else lab.compute[0], node)
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, goal in GOALS_S.items():
        times = [r["running_elsewhere_s"] for r in rows if r["kind"] == kind]
        got = [t for t in times if t is not None]
        out[kind] = {
            "running_elsewhere_s": spread(got) if got else None,
            "not_back": len(times) - len(got),
            "goal_s": goal,
            "met": bool(got) and len(got) == len(times) and max(got) <= goal,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="times each fault is struck")
    ap.add_argument("--slurmd-timeout", type=int, default=300, help="SlurmdTimeout (Slurm's default: 300)")
    ap.add_argument("--dir", type=Path, default=Path("build/hw-fault-path"))
    args = ap.parse_args(argv)
    shutil.rmtree(args.dir, ignore_errors=True)
    conf = {"SlurmdTimeout": str(args.slurmd_timeout)}
    settings = LabSettings(compute_nodes=COMPUTE, gpus_per_node=1, netns=True, slurm_conf=conf)
    with throwaway_user("llhw") as user:
        work = Path(f"/tmp/llhw-{user.name}")
        with running_lab(args.dir / "lab", settings, alive_timeout=120) as lab:
            try:
                cli = lab.cluster.cli(timeout=30)
                job_ids = scale_groups.submit(lab, user, work, GROUPS)
                rows = rounds(lab, cli, job_ids, work / "run", user.uid, args.rounds)
            finally:
                for job_id in lab.cluster.cli().run("squeue", "--noheader", "-o", "%i").split():
                    lab.cluster.cli().run("scancel", job_id)
                shutil.rmtree(work, ignore_errors=True)
    totals = summary(rows)
    result = {"slurm_conf": conf, "groups": GROUPS, "compute_nodes": COMPUTE, "runs": rows, "summary": totals}
    path = write_result("hw_fault_path", result)
    for kind, s in totals.items():
        print(f"{kind}: running elsewhere {s['running_elsewhere_s']} (goal {s['goal_s']} s, met {s['met']})")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
