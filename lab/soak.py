"""`make soak`: many overlapping faults of every kind on the Slurm lab, then checks that nothing was lost.

The lab (test cluster, simulated GPUs, a node daemon per node) runs one job of
3 groups with a fallback checkpoint. `lamplighter chaos` in exact mode draws
faults at random (exponential gaps, mean shorter than a recovery), so faults
overlap and strike groups that are still restarting or healing. The soak
plays the operator: a node whose GPU fault was injected is repaired (the fault
cleared) and given back with `lamplighter nodes resume` a while later; a
crashed node is restarted. A node Slurm drained itself with "Duplicate jobid"
(a controller killed by slurmctld-restart forgets the jobs it started since
its last state save; the node then reports one it "does not have") is
resumed once it has stayed so for a while, as a site's admin would: it is no
node fault, and left alone the cluster shrinks until groups cannot be placed.

The job trains as long as the schedule needs, whatever the machine's speed:
its trainer.steps is far out, faults are drawn until --faults of them struck
something (a miss, a group between attempts, does not count), and once every
one has been watched to its recovery and the operator has repaired
everything, the soak writes the job's stop-at file (rundir/stop_at.py): a
step a few seconds ahead, which every group reads before it gets there. Only
when the job has ended there does it check and print:

- the target reached (the stop step); committed steps lost 0 (steps redone
  from the fallback checkpoint, when no live peer held the state, are counted
  apart);
- every heal bit-identical (weights_identical);
- no node drained without a GPU fault on it, no node marked down that was not
  crashed (wrong_drains, wrong_downs);
- every Slurm job of the job (groups, Lighthouse) ended COMPLETED: no group given up;
- no orphan: trainer process, Slurm job of the job, or Lighthouse listener;
- the node daemons' RSS and CPU at the start and the end.

It writes <dir>/report.json (faults, by_kind, ...) and <dir>/timeline.png.

    python -m lamplighter.lab.soak [--dir build/soak] [--faults 100] [--mtbf 7] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lamplighter.configs.loader import load_job
from lamplighter.configs.schema import ChaosConfig, HealthConfig, RestartConfig
from lamplighter.lab.e2e_run import LabRun, lab_job_config
from lamplighter.lab.run_end import stop_run
from lamplighter.lab.run_report import read_action_logs
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab, leftover_job_processes, running_lab
from lamplighter.lab.source_stamp import source_stamp
from lamplighter.lab.testcluster import slurm_installed
from lamplighter.rundir.contract import RunPaths
from lamplighter.slurm.chaos.inject import CHAOS_FILE, GPU_FAULTS, KINDS, read_records
from lamplighter.slurm.chaos.proc_find import listener_procs
from lamplighter.slurm.chaos.runner import run_schedule
from lamplighter.slurm.parsers import NodeInfo
from lamplighter.slurm.run import SlurmError

SOAK_KINDS = KINDS  # every kind lamplighter chaos can inject on the lab
GPU_KINDS = tuple(GPU_FAULTS)
REPAIR_GPU_AFTER_S = 20.0  # the operator replaces the GPU, then resumes the node
RESTART_NODE_AFTER_S = 10.0  # a crashed node reboots
PARTITION_S = 20.0  # a cut-off node answers again after this (chaos restores it); the operator resumes it
HEAL_PAD_MB = 128  # a heal carries this much extra state, so kill-healer can strike during the transfer
FAR_STEPS = 10_000_000  # trainer.steps: never reached, the soak stops the job (stop-at) when the faults are done
TIME_LIMIT = "04:00:00"  # a bound for the Slurm jobs, far past a soak's length: no renewal falls into it
STOP_LEAD_S = 10.0  # the stop step lies this far ahead at the job's recent pace (every group reads it once a second)
MIN_LEAD_STEPS = 30  # ... and at least this many steps ahead, when the job has just been stalled
SLURM_DRAIN_REASONS = ("Duplicate jobid",)  # Slurm's own drains the operator clears (see the docstring)
RESUME_SLURM_DRAIN_AFTER_S = 15.0  # ... once the node has held such a drain this long
SWEEP_EVERY_S = 5.0


def slurm_drains_to_resume(
    now: float, seen: dict[str, float], nodes: list[NodeInfo]
) -> tuple[list[str], dict[str, float]]:
    """(nodes to resume now, when each still-drained node was first seen so): Slurm's own drains only."""
    first: dict[str, float] = {}
    due = []
    for n in nodes:
        if "DRAIN" not in n.flags or not (n.reason or "").startswith(SLURM_DRAIN_REASONS):
            continue
        first[n.name] = seen.get(n.name, now)
        if now - first[n.name] >= RESUME_SLURM_DRAIN_AFTER_S:
            due.append(n.name)
    return due, {k: v for k, v in first.items() if k not in due}


@dataclass
class Operator:
    """Repairs what the faults broke, later, as a person would: GPUs replaced, crashed nodes rebooted."""

    lab: SlurmLab
    log: Callable[[str], None]
    due: list[tuple[float, str, str]] = field(default_factory=list)  # (when, what, node)

    slurm_drains_resumed: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._drained_since: dict[str, float] = {}
        self._next_sweep = 0.0

    def saw(self, rec: dict[str, Any]) -> None:
        if rec.get("event") != "injected" or not rec.get("node"):
            return
        with self._lock:
            if rec["kind"] in GPU_KINDS:
                self.due.append((time.monotonic() + REPAIR_GPU_AFTER_S, "repair-gpu", rec["node"]))
            elif rec["kind"] == "node-crash":
                self.due.append((time.monotonic() + RESTART_NODE_AFTER_S, "reboot", rec["node"]))
            elif rec["kind"] == "partition":
                self.due.append((time.monotonic() + PARTITION_S + 10.0, "resume", rec["node"]))

    def start(self) -> None:
        """Repair on time, in the background: the chaos loop may be busy watching recoveries."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-operator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        self.tick(all_now=True)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()

    def tick(self, *, all_now: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            items = [d for d in sorted(self.due) if d[0] <= now or all_now]
            for item in items:
                self.due.remove(item)
        for item in items:
            _, what, node = item
            try:
                self._do(what, node)
            except Exception as e:  # a repair that fails is reported, and the soak goes on
                self.log(f"operator: {what} {node} failed: {e}")
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_EVERY_S
            try:
                self._sweep_slurm_drains(now)
            except SlurmError as e:  # the controller is down (slurmctld-restart): next sweep
                self.log(f"operator: cannot read the nodes now: {e}")

    def _sweep_slurm_drains(self, now: float) -> None:
        infos = self.lab.cluster.node_infos()
        due, self._drained_since = slurm_drains_to_resume(now, self._drained_since, infos)
        reasons = {n.name: n.reason or "" for n in infos}
        for node in due:
            self.lab.cluster.cli().run("scontrol", "update", f"nodename={node}", "state=resume")
            self.slurm_drains_resumed.append({"node": node, "reason": reasons[node]})
            self.log(f"operator: resumed {node}, drained by Slurm itself: {reasons[node][:120]}")

    def _do(self, what: str, node: str) -> None:
        if what == "reboot":
            self.lab.restart_node(node)
            self.log(f"operator: {node} rebooted")
        elif what == "resume":
            pass  # the partition is over: only the node's state in Slurm needs a hand
        else:
            from lamplighter.gpusim.inject import clear
            from lamplighter.gpusim.state import StateDir

            clear(StateDir(self.lab.gpusim_root / node))
            self.log(f"operator: GPU of {node} replaced")
        self._resume(node)

    def _resume(self, node: str) -> None:
        argv = [
            sys.executable,
            "-m",
            "lamplighter",
            "nodes",
            "resume",
            node,
            "--config",
            str(self.lab.node_dir(node) / "node.yaml"),
            "--gpusim-root",
            str(self.lab.gpusim_root),
            "--force",
        ]
        out = subprocess.run(argv, env=self.lab.node_env(node), capture_output=True, text=True, timeout=60)
        self.log(f"operator: nodes resume {node}: exit {out.returncode} {(out.stdout + out.stderr).strip()[:200]}")


def daemon_usage(lab: SlurmLab) -> dict[str, float]:
    """RSS (MB, summed) and CPU seconds (summed) of the node daemons now."""
    import psutil

    rss = cpu = 0.0
    for node in lab.cluster.node_names:
        pid = lab.services.pid(f"supervise-{node}")
        if pid is None:
            continue
        try:
            p = psutil.Process(pid)
            rss += p.memory_info().rss / 2**20
            t = p.cpu_times()
            cpu += t.user + t.system
        except psutil.Error:
            continue
    return {"rss_mb": round(rss, 1), "cpu_s": round(cpu, 2), "t": time.monotonic()}


def median_max(vals: list[float | None]) -> dict[str, float] | None:
    got = [v for v in vals if v is not None]
    return {"median": round(statistics.median(got), 3), "max": round(max(got), 3), "n": len(got)} if got else None


# A hung trainer is a live peer stuck in a collective: its survivors wait out pg_timeout_s (3 s) whatever the
# rendezvous bound, until the daemon kills it at the hang timeout. A fault whose window holds one is not
# telling about its own kind's stall.
HOLDING_KINDS = ("hang", "hang-collective")
HANG_LOOKBACK_S = 10.0  # the soak's hang timeout (8 s) and a margin: a hang that old may still hold its peers


def behind_a_hang(fault: dict[str, Any], faults: list[dict[str, Any]]) -> bool:
    """A hang (this one included) was injected from HANG_LOOKBACK_S before this fault until its group committed."""
    t = fault.get("t_injected")
    if t is None:
        return False
    end = fault.get("t_first_commit_after") or t
    return any(
        o["kind"] in HOLDING_KINDS and o.get("t_injected") is not None and t - HANG_LOOKBACK_S <= o["t_injected"] <= end
        for o in faults
    )


def by_kind(faults: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind in sorted({f["kind"] for f in faults}):
        mine = [f for f in faults if f["kind"] == kind]
        out[kind] = {
            "count": len(mine),
            "recovered": sum(1 for f in mine if f.get("t_first_commit_after")),
            "detection_s": median_max([f.get("detection_latency_s") for f in mine]),
            "back_to_commit_s": median_max([f.get("recovery_s") for f in mine]),
            "survivor_stall_s": median_max([f.get("survivor_stall_s") for f in mine]),
            "survivor_stall_no_hang_s": median_max(
                [f.get("survivor_stall_s") for f in mine if not behind_a_hang(f, faults)]
            ),
        }
    return out


def wrong_node_actions(
    actions: list[dict[str, Any]], injected: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Drains and down-marks no injected fault explains. A drain is right after a GPU fault on its node, or,
    as the head's answer to a silent slurmd that Slurm still sees (observation type node-silent: drained, not
    marked down, so that other tenants' jobs there live), after a crash or a cut of its node; a down-mark is
    right after a crash or a cut of its node."""
    gpu_at = [(r["t"], r["node"]) for r in injected if r["kind"] in GPU_KINDS]
    crash_at = [(r["t"], r["node"]) for r in injected if r["kind"] in ("node-crash", "partition")]
    drains: list[dict[str, Any]] = []
    downs: list[dict[str, Any]] = []
    for a in actions:
        node = a.get("target") if a.get("action") in ("drain", "mark_down") else None
        if not node:
            continue
        obs = a.get("observation")
        silence = isinstance(obs, dict) and obs.get("type") == "node-silent"
        drained_for = gpu_at + crash_at if silence else gpu_at
        pool = drained_for if a["action"] == "drain" else crash_at
        if not any(n == node and t <= a["ts"] for t, n in pool):
            (drains if a["action"] == "drain" else downs).append(
                {"node": node, "ts": a["ts"], "reason": a.get("reason")}
            )
    return drains, downs


def orphans(run: LabRun, job: str, lighthouse_port: int) -> dict[str, Any]:
    assert run.sub is not None
    queued: list[Any]
    try:
        queued = [q.job_id for q in run.api.jobs() if q.job_id in set(run.sub.all_job_ids())]
    except SlurmError as e:
        queued = [f"unknown: {e}"]
    return {
        "processes": leftover_job_processes(job),
        "slurm_jobs": queued,
        "lighthouse_listeners": [p.pid for p in listener_procs(lighthouse_port)],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m lamplighter.lab.soak", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dir", type=Path, default=Path("build/soak"), help="where the lab and report go (wiped first)")
    ap.add_argument(
        "--faults",
        type=int,
        default=100,
        help="faults drawn until this many hit something (default 100); the job trains until they are done",
    )
    ap.add_argument("--mtbf", type=float, default=7.0, help="mean seconds between faults (default 7)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--rendezvous",
        default=None,
        metavar="adaptive|MS|null",
        help="torchft.rendezvous_timeout_ms for the job (default: the schema's, 'adaptive'; null: pg_timeout_s)",
    )
    ap.add_argument("--kinds", default=",".join(SOAK_KINDS), help="fault kinds to draw from")
    args = ap.parse_args(argv)
    missing = slurm_installed()
    if missing:
        print(f"soak: {missing}", file=sys.stderr)
        return 2
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    source = source_stamp()  # at the start: the code that ran, whatever happens to the tree meanwhile
    t_start = time.monotonic()
    # Stopped (Ctrl-C, SIGTERM, or started in the background, where a shell ignores SIGINT): the lab is
    # still torn down by the `finally` below, leaving no daemon, slurmd or trainer behind.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def log(text: str) -> None:
        print(f"[soak {time.monotonic() - t_start:6.1f}s] {text}", flush=True)

    root = args.dir.resolve()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    log(f"starting the lab under {root} ...")
    with running_lab(
        root / "lab",
        LabSettings(
            compute_nodes=6,
            # Exact faults hit groups still starting: a start-up hang is found after startup_timeout_s, which
            # is kept near what a restart takes here (requeue, start, heal: 10-20 s), not the 300 s default.
            health=HealthConfig(hang_timeout_s=8.0, startup_timeout_s=45.0, poll_interval_s=0.5),
            restart=RestartConfig(budget_per_group=1000, crash_loop_max=1000),
        ),
    ) as lab:
        port = lab.job_port
        cfg = lab_job_config(lab, root / "soak", name="soak", steps=FAR_STEPS, groups=3, port=port)
        cfg["slurm"]["time"] = TIME_LIMIT
        # The fallback checkpoint: when overlapping faults leave no live peer, the job goes back to it.
        cfg["trainer"]["checkpoint"] = {"enabled": True, "interval_s": 10}
        cfg["trainer"].setdefault("model", {})["heal_pad_mb"] = HEAL_PAD_MB
        if args.rendezvous is not None:
            # Read as YAML, like the config file would: 300 is a number, null is None; the schema judges it.
            cfg["torchft"]["rendezvous_timeout_ms"] = yaml.safe_load(args.rendezvous)
        path = root / "soak.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        job = load_job(path)
        run = LabRun(lab, job, path)
        sub = run.submit()
        log(f"submitted: groups {sub.groups}, training until the faults are done; waiting for every group to commit")
        run.wait_all_committing()
        usage_start = daemon_usage(lab)
        operator = Operator(lab, log)
        operator.start()
        chaos = ChaosConfig(
            enabled=True,
            mtbf_s=args.mtbf,
            seed=args.seed,
            kinds=kinds,
            start_after_s=0,
            mode="exact",
        )
        n = struck = 0
        ctx = run.ctx
        ctx.partition_s = PARTITION_S
        for rec in run_schedule(ctx, chaos, recovery_timeout=180.0, poll=0.2, strikes=args.faults):
            operator.saw(rec)
            if rec["event"] in ("injected", "missed"):
                n += 1
                struck += rec["event"] == "injected"
                what = rec.get("why") or f"node {rec.get('node')}"
                log(
                    f"fault {n} ({struck}/{args.faults} struck): {rec['event']} {rec['kind']} group "
                    f"{rec.get('group')} ({what})"
                )
            elif rec.get("job_ended"):
                log(f"the job ended before the recovery of {rec['kind']} was seen: {rec['job_ended']}")
        ctx.wait_restores()
        operator.stop()
        paths = RunPaths(Path(sub.run_dir))
        end = stop_run(paths.root, sub.groups, STOP_LEAD_S, MIN_LEAD_STEPS)
        log(f"every fault delivered and watched; the job stops at step {end} ({paths.stop_at()})")
        states = run.wait_end(1800)
        usage_end = daemon_usage(lab)
        report = run.report(extra={"slurm_end_states": {str(k): v for k, v in states.items()}})
        records = read_records(Path(sub.run_dir) / CHAOS_FILE)
        injected = [r for r in records if r.get("event") == "injected"]
        missed = [r for r in records if r.get("event") == "missed"]
        actions = read_action_logs(lab.action_logs())
        drains, downs = wrong_node_actions(actions, injected)
        left = orphans(run, "soak", port)
        minutes = max(1e-9, (usage_end["t"] - usage_start["t"]) / 60)
        soak = {
            "faults": report["faults"],
            "missed": missed,
            "faults_injected": len(injected),
            "faults_wanted": args.faults,
            "by_kind": by_kind(report["faults"]),
            "reached_target": report["reached_target"],
            "steps_committed": report["steps_committed"],
            "target_steps": report["target_steps"],
            "stop_at": report["stop_at"],
            "steps_lost": report["steps_lost"],
            "steps_redone_from_fallback": report["steps_redone_from_fallback"],
            "weights_identical": report["weights_identical"],
            "weights_check": report["weights_check"],
            "wrong_drains": drains,
            "slurm_drains_resumed": operator.slurm_drains_resumed,
            "wrong_downs": downs,
            "orphans": left,
            "slurm_end_states": report["slurm_end_states"],
            "daemon_rss_mb_start": usage_start["rss_mb"],
            "daemon_rss_mb_end": usage_end["rss_mb"],
            "daemon_cpu_s_per_min": round((usage_end["cpu_s"] - usage_start["cpu_s"]) / minutes, 2),
            "wall_s": round(time.monotonic() - t_start, 1),
            "seed": args.seed,
            "mtbf_s": args.mtbf,
            "rendezvous_timeout_ms": job.torchft.rendezvous_timeout_ms,
            "source": source,
        }
        (root / "report.json").write_text(json.dumps(soak, indent=2))
        if report.get("timeline"):
            shutil.copy(report["timeline"], root / "timeline.png")
        return verdict(soak, args.faults, log)


def verdict(soak: dict[str, Any], want: int, log: Callable[[str], None]) -> int:
    problems = []
    if soak["faults_injected"] < want:
        problems.append(f"only {soak['faults_injected']} faults hit something (want {want})")
    if not soak["reached_target"]:
        problems.append(f"target (the stop step) not reached: {soak['steps_committed']}/{soak['target_steps']}")
    if soak["steps_lost"]:
        problems.append(f"{soak['steps_lost']} committed steps lost")
    if soak["weights_identical"] is not True:
        problems.append(f"weights identical: {soak['weights_identical']} ({soak['weights_check']})")
    if soak["wrong_drains"] or soak["wrong_downs"]:
        problems.append(f"wrong drains {soak['wrong_drains']}, wrong downs {soak['wrong_downs']}")
    ended = soak["slurm_end_states"]
    if set(ended.values()) != {"COMPLETED"}:
        problems.append(f"not every Slurm job of the job ended COMPLETED: {ended}")
    left = soak["orphans"]
    if any(left.values()):
        problems.append(f"orphans: {left}")
    print(
        f"{'kind':<16}{'count':>6}{'recovered':>10}{'detect med/max':>18}{'back med/max':>18}{'stall med/max':>18}"
        f"{'no hang: stall':>18}"
    )
    for kind, row in soak["by_kind"].items():

        def mm(x: dict[str, float] | None) -> str:
            return "-" if x is None else f"{x['median']:.2f}/{x['max']:.2f}"

        print(
            f"{kind:<16}{row['count']:>6}{row['recovered']:>10}{mm(row['detection_s']):>18}"
            f"{mm(row['back_to_commit_s']):>18}{mm(row['survivor_stall_s']):>18}{mm(row['survivor_stall_no_hang_s']):>18}"
        )
    log(
        f"faults struck {soak['faults_injected']}, missed {len(soak['missed'])}; steps "
        f"{soak['steps_committed']}/{soak['target_steps']}, lost {soak['steps_lost']}, redone from fallback "
        f"{soak['steps_redone_from_fallback']}, weights identical {soak['weights_identical']}, wrong drains "
        f"{len(soak['wrong_drains'])}, wrong downs {len(soak['wrong_downs'])}, Slurm's own drains resumed "
        f"{len(soak.get('slurm_drains_resumed', []))}, orphans "
        f"{sum(len(v) for v in soak['orphans'].values())}, daemon RSS {soak['daemon_rss_mb_start']} -> "
        f"{soak['daemon_rss_mb_end']} MB, daemon CPU {soak['daemon_cpu_s_per_min']} s/min, wall {soak['wall_s']} s"
    )
    for p in problems:
        log(f"PROBLEM: {p}")
    log("soak OK" if not problems else "soak FAILED")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
