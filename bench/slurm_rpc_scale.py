"""slurmctld RPCs lamplighter causes, and its times to act, against the node count (#31).

The Slurm lab (lab/slurm_lab.py: a real slurmctld, one slurmd per node in a PID namespace,
`lamplighter supervise` on every node as systemd would run it) with N compute nodes, and one
lamplighter job of N replica groups, one per compute node, submitted by a throwaway user with
`lamplighter submit` (bench/scale_groups.py: its own Lighthouse job on the head, the in-job agent in
every group job, and as trainer a torch-free replica speaking torchft's protocol to that Lighthouse).
Once every group is in one quorum, after a settling time: `sdiag -r`, a window, `sdiag`: slurmctld's
own count of the RPCs it served, by type and by user, per second (sdiag's own aside; the lab's harness
sends none during the window), and each daemon's CPU and RSS; the head's cycle time and the nodes it
probed (its status, sampled each second of the window). Then four faults, one at a time, and the time
from each to lamplighter's first action on it in the daemons' action logs: group 1's trainer is killed;
group 2's hangs (SIGSTOP: its daemon sees its step stand still at the Lighthouse for the job's
hang_timeout_s); a GPU of the first compute node reports an uncorrectable ECC error (drain); the last
compute node crashes (the head drains it or marks it down). FAULT_ROUNDS rounds of the four, the lab
made whole between them, a trainer struck only once its node's daemon has seen it take steps (before,
a restarted trainer is under its startup timeout); the median is reported, every sample kept. The
first round also counts the RPCs each fault cost (an `sdiag -r` at the fault, read AFTER_ACTION_S after
the action, less the steady state).

sdiag's per-user section tells lamplighter's calls (root's, less the messages Slurm's own daemons send
as root) from the job's own (the user's: its submission, the agents' and their srun calls):
lamplighter_rpc_per_s is root's share, whatever the job does.

Each node (its slurmd, its jobs and its node daemon) runs in a network namespace of its own with its
own address on a bridge (lab/testcluster_net.py; --no-netns: all on the host's loopback), so Slurm's
traffic between slurmctld and the nodes, and the replicas' with their Lighthouse, crosses links as on a
cluster; and in its slurmd's PID and mount namespaces, so a node daemon's /proc holds its node's
processes only (with --no-netns it sees the whole machine's: its scan then costs what 64 nodes hold).
Writes bench/results/slurm_rpc_scale.json.

    python -m bench.slurm_rpc_scale [--nodes 4,16] [--window-s 30] [--dir build/slurm-rpc-scale]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import signal
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from bench import scale_groups
from bench.line_fit import fit_line
from bench.results_io import RESULTS, environment, spread
from lamplighter.bare.accounts import Account
from lamplighter.configs.schema import NodeConfig
from lamplighter.configs.slurm_names import group_job_name
from lamplighter.gpusim.inject import clear as gpu_clear
from lamplighter.gpusim.inject import inject as gpu_inject
from lamplighter.gpusim.state import StateDir
from lamplighter.lab.sdiag import OWN, Sdiag, parse_sdiag
from lamplighter.lab.slurm_lab import LabSettings, running_lab
from lamplighter.lab.testcluster import wait_until
from lamplighter.lab.throwaway_user import throwaway_user
from lamplighter.lighthouse.status import LighthouseStatus, LighthouseStatusError, fetch_status
from lamplighter.rundir.contract import read_lighthouse_address
from lamplighter.slurm.chaos.inject import read_records
from lamplighter.slurm.chaos.proc_find import trainer_procs
from lamplighter.slurm.run import SlurmError
from lamplighter.supervisor.node.lighthouse_reads import READ_EVERY_S
from lamplighter.supervisor.status_socket import StatusError, read_status

JOB = scale_groups.JOB
VICTIM = 1  # the group whose trainer is killed
HUNG = 2  # the group whose trainer hangs
# RPCs slurmd and the step daemons send on their own (registration, a step's or job's end): Slurm's, not lamplighter's.
SLURM_OWN = frozenset(
    {
        "MESSAGE_NODE_REGISTRATION_STATUS",
        "MESSAGE_EPILOG_COMPLETE",
        "REQUEST_COMPLETE_BATCH_SCRIPT",
        "REQUEST_STEP_COMPLETE",
        "REQUEST_COMPLETE_PROLOG",
    }
)


def lamplighter_rate(by_type_per_s: dict[str, float]) -> float:
    """RPCs a second that the cluster's clients sent, Slurm's own daemons' aside."""
    return sum(v for k, v in by_type_per_s.items() if k not in SLURM_OWN)


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


SLURM_USER = "root"  # the lab's SlurmUser: slurmd and slurmstepd send as root, as lamplighter's daemons do


def by_sender(sd: Sdiag, jobs_user: str) -> dict[str, float]:
    """RPCs a second by who sent them, from sdiag's per-user counts: `lamplighter` (root's, less the
    messages Slurm's own daemons send as root and sdiag's own calls), `slurm_daemons` (those messages),
    `jobs_user` (the jobs' srun and scontrol calls) and `others` (anyone else)."""
    span = max(1, sd.seconds)
    users = {name: s.count for name, s in sd.by_user.items()}
    slurm = sum(sd.by_type[k].count for k in SLURM_OWN if k in sd.by_type)
    own = sd.by_type[OWN].count if OWN in sd.by_type else 0
    root, jobs = users.get(SLURM_USER, 0), users.get(jobs_user, 0)
    if root < slurm + own:
        raise ValueError(
            f"sdiag counts {root} RPCs from {SLURM_USER}, fewer than Slurm's own {slurm} and sdiag's {own}"
        )
    return {
        "lamplighter": (root - slurm - own) / span,
        "slurm_daemons": slurm / span,
        "jobs_user": jobs / span,
        "others": (sum(users.values()) - root - jobs) / span,
    }


def fit(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """lamplighter's RPCs/s as a line in the node count, projected (flat when it changes by less than one
    RPC in the counting window); None with fewer than two sizes. Every size counts, a CPU-starved one too:
    the count is root's alone, so the jobs' requeues and srun calls on a starved lab are not in it (a row
    from before the per-user split is left out when starved)."""
    kept = [
        r
        for r in rows
        if r.get("rpc_from") == "sdiag by user" or r.get("jobs_running_at_end", r["nodes"]) >= r["nodes"]
    ]
    windows = [float(r["window_s"]) for r in kept if r.get("window_s")]
    line = fit_line(
        [float(r["nodes"]) for r in kept],
        [r["lamplighter_rpc_per_s"] for r in kept],
        1.0 / min(windows) if windows else None,
        sizes=(64, 1_000, 10_000),
    )
    if line is None:
        return None
    # #31: all of lamplighter at most 1 slurmctld RPC a second, whatever the node count
    return {**line, "over_nodes": [r["nodes"] for r in kept], "goal": 1.0}


def head_cycles(sock: Path, window_s: float) -> tuple[list[float], list[int]]:
    """The head daemon's last cycle duration (its status' cycle_s) and how many nodes that cycle probed,
    read once a second for the window."""
    cycles: list[float] = []
    probed: list[int] = []
    end = time.monotonic() + window_s
    while time.monotonic() < end:
        try:
            st = read_status(sock, timeout=5)
        except (StatusError, OSError):
            st = {}
        if isinstance(st.get("cycle_s"), float | int):
            cycles.append(float(st["cycle_s"]))
        if isinstance(st.get("probed_last_cycle"), int):
            probed.append(st["probed_last_cycle"])
        time.sleep(1.0)  # a sampling period, not a wait for anything
    return cycles, probed


def first_action(
    lab: Any, since: float, target: str | None, kinds: tuple[str, ...] | None, timeout_s: float
) -> float | None:
    """Seconds from `since` to the first action on `target` (a node, a job id; None: any), of those kinds
    (None: any), in any daemon's action log."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        for rec in action_records(lab, since):
            if (kinds is None or rec.get("action") in kinds) and target in (None, rec.get("target")):
                return float(rec["ts"]) - since
        time.sleep(0.2)  # polling the logs the daemons append to
    return None


def action_records(lab: Any, since: float) -> Iterator[dict[str, Any]]:
    """Every daemon's logged actions taken at or after `since`."""
    for path in lab.action_logs():
        yield from (rec for rec in read_records(path) if rec.get("ts", 0) >= since)


def exit_seen(lab: Any, since: float, target: str) -> float | None:
    """Seconds from `since` to the moment the daemon saw the trainer of job `target` exit (its exit action's
    observation, `exited_at`): of a kill's time to act, what was the daemon's own noticing, before it asked
    Slurm whether the job ended."""
    for rec in action_records(lab, since):
        obs = rec.get("observation") or {}
        if rec.get("target") == target and obs.get("type") == "exit" and isinstance(obs.get("exited_at"), int | float):
            return float(obs["exited_at"]) - since
    return None


AFTER_ACTION_S = 10.0  # a fault's RPCs are counted to this long after lamplighter's first action on it


def fault_rpcs(sd: Sdiag, jobs_user: str, steady: dict[str, Any]) -> dict[str, Any]:
    """Pure: the RPCs one fault cost, from an sdiag reset just before it and read AFTER_ACTION_S after
    lamplighter's first action on it: lamplighter's (root's, as by_sender counts them) and the jobs' own,
    each less what the steady state (`steady`: a row's rpc_per_s_by_sender and by_type_per_s) sends in as
    long; by type, every type's count over its steady rate (all senders: sdiag does not split types by user)."""
    span = max(1, sd.seconds)
    senders = by_sender(sd, jobs_user)
    base = steady["rpc_per_s_by_sender"]
    over = {
        k: round(s.count - steady["by_type_per_s"].get(k, 0.0) * span, 1)
        for k, s in sd.by_type.items()
        if k != OWN and s.count - steady["by_type_per_s"].get(k, 0.0) * span >= 0.5
    }
    return {
        "span_s": span,
        "lamplighter": round((senders["lamplighter"] - base["lamplighter"]) * span, 1),
        "jobs_user": round((senders["jobs_user"] - base["jobs_user"]) * span, 1),
        "by_type_over_steady": dict(sorted(over.items(), key=lambda kv: -kv[1])),
    }


FAULT_ROUNDS = 3  # each fault this many times per size: the median is reported (one sample is mostly noise)


def faults(
    lab: Any,
    cli: Any,
    user: str,
    job_ids: dict[int, str],
    steady: dict[str, Any],
    rounds: int,
    run_dir: Path,
    owner: int,
) -> dict[str, Any]:
    """A trainer killed (its node daemon sees it exit and requeues its job), a trainer hung (SIGSTOP: its
    daemon sees its step stand still at the Lighthouse for hang_timeout_s, then ends and requeues it), a
    GPU fault on the first compute node (its daemon drains it) and a crash of the last (the head drains it
    or marks it down), one at a time: the time from each to lamplighter's first action on it, from the
    action logs, `rounds` times, and the slurmctld RPCs each cost in the first round (fault_rpcs).

    Between rounds the lab is made whole again, as an admin would: the GPU repaired and its node resumed,
    the crashed node started again, and every group back in one quorum. The same two nodes take the GPU
    fault and the crash every round: the drain rate limit allows re-draining a node it already counted."""
    gpu_node, crash_node = lab.compute[0], lab.compute[-1]

    def signal_trainer(group: int, sig: int) -> None:
        for st in trainer_procs(JOB, group):
            os.kill(st.pid, sig)

    plan: list[tuple[str, Any, str, tuple[str, ...] | None, int | None]] = [
        ("kill", lambda: signal_trainer(VICTIM, signal.SIGKILL), job_ids[VICTIM], None, VICTIM),
        ("hang", lambda: signal_trainer(HUNG, signal.SIGSTOP), job_ids[HUNG], None, HUNG),
        (
            "gpu_fault",
            lambda: gpu_inject(StateDir(lab.gpusim_root / gpu_node), 0, "ecc-uncorrectable"),
            gpu_node,
            ("drain",),
            None,
        ),
        ("node_crash", lambda: lab.cluster.crash_node(crash_node), crash_node, ("drain", "mark_down"), None),
    ]
    samples: dict[str, list[float | None]] = {kind: [] for kind, *_ in plan}
    seen_exit: list[float | None] = []  # each kill: when its daemon saw the exit (the rest is Slurm's answer)
    phase = random.Random(len(job_ids))  # the same strike times for a size, run after run
    rpcs: dict[str, Any] = {}
    for r in range(rounds):
        if r:
            make_whole(lab, cli, gpu_node, crash_node)
            wait_until(
                lambda: all_in_quorum(run_dir, owner, len(job_ids)), 600, f"every group in one quorum, round {r + 1}"
            )
        for kind, strike, target, kinds, group in plan:
            if group is not None:
                wait_until(functools.partial(trainer_procs, JOB, group), 300, f"group {group}'s trainer")
                seen_stepping(lab, cli, job_ids[group], group)
                # Not a wait for anything: seen_stepping returns just after one of the daemon's Lighthouse reads,
                # and a strike at that same moment every time would time one phase of its cycle, not a fault.
                time.sleep(phase.uniform(0.0, READ_EVERY_S))
            if r == 0:
                cli.run("sdiag", "-r")
            t = time.time()
            strike()
            took = first_action(lab, t, target, kinds, 60)
            samples[kind].append(took)
            if kind == "kill":
                seen_exit.append(None if took is None else exit_seen(lab, t, target))
            print(f"  round {r + 1}/{rounds} {kind}: {'none in 60 s' if took is None else f'{took:.2f} s'}", flush=True)
            if r == 0:
                # A counting window after the action, for what follows it (a requeue's start, the head's reads).
                time.sleep(max(0.0, t + (took or 0.0) + AFTER_ACTION_S - time.time()))
                rpcs[kind] = fault_rpcs(parse_sdiag(cli.run("sdiag")), user, steady)
            else:
                # Each fault alone: a daemon that requeues a job waits for Slurm inside its cycle (up to some
                # seconds), and would see the next fault that much later.
                first_action(lab, t, None, ("requeue",), AFTER_ACTION_S)
    return {
        "detect_to_action_s": {k: median_of(v) for k, v in samples.items()},
        "detect_to_action_rounds_s": samples,
        "kill_exit_seen_rounds_s": seen_exit,
        "fault_rounds": rounds,
        "rpc_per_fault": rpcs,
        "hang_timeout_s": scale_groups.HANG_TIMEOUT_S,
    }


def job_quorum(run_dir: Path, owner: int) -> LighthouseStatus | None:
    """The job's Lighthouse's last quorum, None while it cannot be read (its address is the job's user's
    file, read as any of root's reads of a user's file: bounded, and only if it is that user's)."""
    address = read_lighthouse_address(run_dir, owner)
    try:
        return fetch_status(address, timeout=5) if address is not None else None
    except LighthouseStatusError:
        return None


def all_in_quorum(run_dir: Path, owner: int, groups: int) -> bool:
    quorum = job_quorum(run_dir, owner)
    return quorum is not None and len({m.group for m in quorum.members}) == groups


def seen_stepping(lab: Any, cli: Any, job_id: str, group: int, timeout_s: float = 300) -> None:
    """Returns once the daemon of the group's node has seen its trainer take steps: the group's step in that
    daemon's own reads of the Lighthouse (its status) changed twice. Until it has, a trainer back from a
    restart is under its startup timeout, not its hang timeout (a quorum from before the restart may still
    list its dead member, whose step never changes)."""
    node = wait_until(lambda: cli.run("squeue", "--noheader", "-j", job_id, "-o", "%N").strip(), 60, f"{job_id}'s node")
    sock = lab.node_dir(node) / "status.sock"

    def step() -> tuple[int] | None:  # a tuple: step 0 is a step
        try:
            jobs = read_status(sock, timeout=5).get("jobs", [])
        except (StatusError, OSError):
            return None
        steps = [j.get("lighthouse_steps", {}).get(str(group)) for j in jobs if j.get("job") == JOB]
        return (steps[0],) if steps and steps[0] is not None else None

    seen = [wait_until(step, timeout_s, f"group {group}'s steps in {node}'s daemon")]

    def moved() -> tuple[int] | None:
        now = step()
        return now if now is not None and now != seen[-1] else None

    for _ in range(2):
        seen.append(wait_until(moved, timeout_s, f"{node}'s daemon to see group {group} take a step"))


def median_of(values: list[float | None]) -> float | None:
    """The median of the samples that came (None when none did: a missed action is in the rounds' list)."""
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def make_whole(lab: Any, cli: Any, gpu_node: str, crash_node: str) -> None:
    """The admin's repairs after a round: the GPU healthy and its node resumed, the crashed node up again;
    returns once neither node is drained or down."""
    gpu_clear(StateDir(lab.gpusim_root / gpu_node))
    if not lab.cluster.node_alive(crash_node):
        lab.cluster.restart_node(crash_node)
    for node in (gpu_node, crash_node):
        try:
            cli.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
        except SlurmError:
            pass  # not drained or down (lamplighter resumed it first): nothing to resume

    def usable() -> bool:
        states = {i.name: i.state.upper() for i in lab.cluster.node_infos()}
        return not any(bad in states.get(n, "DOWN") for n in (gpu_node, crash_node) for bad in ("DRAIN", "DOWN"))

    wait_until(usable, 120, f"{gpu_node} and {crash_node} back in service")


def measure(
    folder: Path, nodes: int, settle_s: float, window_s: float, user: Account, netns: bool, rounds: int = FAULT_ROUNDS
) -> dict[str, Any]:
    shutil.rmtree(folder, ignore_errors=True)
    settings = LabSettings(compute_nodes=nodes, gpus_per_node=1, netns=netns)
    # The job's folder is its user's: outside the lab's, which the user may not reach.
    work = Path(f"/tmp/llscale-{user.name}-{nodes}")
    shutil.rmtree(work, ignore_errors=True)
    with running_lab(folder, settings, alive_timeout=120) as lab:
        try:
            cli = lab.cluster.cli(timeout=30)
            job_ids = scale_groups.submit(lab, user, work, nodes)
            run_dir = work / "run"

            wait_until(lambda: all_in_quorum(run_dir, user.uid, nodes), 600, f"{nodes} groups in one quorum")
            time.sleep(settle_s)
            daemons = {n: lab.services.pid(f"supervise-{n}") for n in lab.cluster.node_names}
            pids = {n: p for n, p in daemons.items() if p is not None}
            cpu0 = {n: cpu_s(p) for n, p in pids.items()}
            cli.run("sdiag", "-r")
            cycles, probed = head_cycles(lab.node_dir(lab.head) / "status.sock", window_s)  # sampled each second
            raw = cli.run("sdiag")
            (folder / "sdiag.txt").write_text(raw)  # what the counts came from
            sd = parse_sdiag(raw)
            senders = by_sender(sd, user.name)
            cpu1 = {n: cpu_s(p) for n, p in pids.items()}
            rss = {n: psutil.Process(p).memory_info().rss / 1e6 for n, p in pids.items()}
            groups_prefix = group_job_name(JOB, 0)[:-1]  # ll-scale-g
            states = [
                state
                for name, _, state in (
                    line.partition(" ") for line in cli.run("squeue", "--noheader", "-o", "%j %T").splitlines()
                )
                if name.startswith(groups_prefix)
            ]
            rates = sd.per_second()
            compute_cpu = [(cpu1[n] - cpu0[n]) / window_s for n in lab.compute if n in pids]
            row = {
                "nodes": nodes,
                "node_network": "a namespace per node" if netns else "the host's loopback",
                "window_s": sd.seconds,
                "slurmctld_rpc_per_s": sum(rates.values()),
                "slurmctld_rpc_per_node_s": sum(rates.values()) / nodes,
                "lamplighter_rpc_per_s": senders["lamplighter"],
                "rpc_from": "sdiag by user",
                "rpc_per_s_by_sender": senders,
                # Before the split by user: every RPC type Slurm's daemons do not send, whoever sent it.
                "non_slurm_rpc_per_s": lamplighter_rate(rates),
                "by_type_per_s": dict(sorted(rates.items(), key=lambda kv: -kv[1])),
                "daemon_restarts": {
                    n: len(s.starts) - 1 for n, s in lab.services.services.items() if len(s.starts) > 1
                },
                "head_daemon_cpu_cores": (cpu1[lab.head] - cpu0[lab.head]) / window_s if lab.head in pids else None,
                "compute_daemon_cpu_cores_median": sorted(compute_cpu)[len(compute_cpu) // 2] if compute_cpu else None,
                "compute_daemon_rss_mb_max": max(rss[n] for n in lab.compute if n in rss),
                "jobs_running_at_end": states.count("RUNNING"),
                "actions_logged": sum(len(p.read_text().splitlines()) for p in lab.action_logs()),
                "head_cycle_s": spread(cycles) if cycles else None,
                "head_probed_per_cycle": spread([float(p) for p in probed]) if probed else None,
                "head_probe_sweep": NodeConfig.model_fields["head_probe_sweep"].default,  # the lab's nodes keep it
            }
            return {**row, **faults(lab, cli, user.name, job_ids, row, rounds, run_dir, user.uid)}
        finally:
            try:
                for job_id in lab.cluster.cli().run("squeue", "--noheader", "-o", "%i").split():
                    lab.cluster.cli().run("scancel", job_id)
            except Exception as e:  # the cluster is taken down after either way
                print(f"slurm_rpc_scale: cancelling the jobs: {e}", flush=True)
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="4,16", help="compute node counts")
    ap.add_argument("--settle-s", type=float, default=15.0)
    ap.add_argument("--window-s", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=FAULT_ROUNDS, help="times each fault is struck per size")
    ap.add_argument("--no-netns", action="store_true", help="every node on the host's loopback, not a namespace each")
    ap.add_argument("--dir", type=Path, default=Path("build/slurm-rpc-scale"))
    ap.add_argument("--out", type=Path, default=RESULTS / "slurm_rpc_scale.json")
    ap.add_argument("--refit", action="store_true", help="recompute the line from --out's rows, measuring nothing")
    args = ap.parse_args(argv)
    if args.refit:
        old = json.loads(args.out.read_text())
        rows = old.pop("nodes")
        write(args.out, old, rows)
        return 0
    rows = []
    with throwaway_user("llscale") as user:
        for n in [int(x) for x in args.nodes.split(",")]:
            t = time.monotonic()
            row = measure(
                args.dir / f"nodes-{n}", n, args.settle_s, args.window_s, user, not args.no_netns, args.rounds
            )
            rows.append(row)
            top = ", ".join(f"{k} {v:.2f}" for k, v in list(row["by_type_per_s"].items())[:4])
            print(
                f"{n:3d} nodes: {row['lamplighter_rpc_per_s']:.2f} slurmctld RPC/s from lamplighter, "
                f"{row['slurmctld_rpc_per_s']:.2f} in all ({top}); compute daemon "
                f"{row['compute_daemon_cpu_cores_median']:.3f} cores, head {row['head_daemon_cpu_cores']:.3f} "
                f"({time.monotonic() - t:.0f} s)",
                flush=True,
            )
    result: dict[str, Any] = {"name": args.out.stem, "environment": environment(), "window_s": args.window_s}
    write(args.out, result, rows)
    return 0


def write(out: Path, result: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    line = fit(rows)
    if line is not None:
        a, b = line["fixed"], line["per_unit"]
        at = line["projected"]["1000"]
        print(f"lamplighter's RPCs/s ~ {a:.2f} + {b:.4f} x nodes: {at:.2f} at 1,000 nodes", flush=True)
    result["fit_lamplighter_rpc_per_s"] = line
    result["nodes"] = rows
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    raise SystemExit(main())
