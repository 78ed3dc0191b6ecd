"""A busy queue: does the job keep a live peer while a requeued or renewing group waits behind other users' jobs?

Everything else lamplighter measured, it measured on an idle lab, where a requeued group runs again about
a second later. Here (the Slurm lab, a network namespace per node, node daemons on) the partition is kept
busy by another user (a real second account): whenever no group of the job is waiting, one of that user's
jobs waits in the queue at the top priority (`sbatch --priority=TOP`, as an admin's urgent work would),
and its jobs hold a node for `--filler-s` seconds each. A node a group gives up goes to that job, and the
group waits for the next node to come free: up to `--filler-s`.

The job: 3 groups of the reference trainer, one node each, on 4 compute nodes; `restart.in_job: 0`, so a
killed trainer goes back through the queue (the node daemon's requeue); a time limit of `--time-min`
minutes with the renewal spacing above the queue wait (docs/queues.md), so that each group renews at
least once, each renewal waiting in the queue too; the Lighthouse job without a limit (it takes the
partition's, and never renews). One group's trainer is killed once every group trains.

Reported (bench/results/busy_queue.json, and a timeline plot busy_queue.png): for every time a group
left (the kill's requeue, each renewal), how long it waited in the queue (PENDING, as squeue showed it
every second), when it committed again and whom it healed from, and how many of the other groups kept
committing throughout its absence; the longest stretch in which no group committed; steps lost and
whether the groups' weights stayed identical (the run report). A run that lost a step, in which a group came
back without healing from a peer, or in which some stretch had no group committing for longer than
`--stall-limit-s`, exits 1.

    make busy-queue            (about 10 minutes)
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from bench.results_io import RESULTS, write_result
from lamplighter.bare.accounts import Account
from lamplighter.configs.loader import load_job
from lamplighter.configs.schema import HealthConfig, RestartConfig
from lamplighter.lab.e2e_run import LabRun, lab_job_config
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab, running_lab
from lamplighter.lab.testcluster import wait_until
from lamplighter.lab.throwaway_user import throwaway_user
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import StepRecord, read_steps
from lamplighter.slurm.injob.renew import RENEWAL_DIR
from lamplighter.slurm.run import SlurmError

GROUPS = 3
WAITING = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED")


class BusyQueue:
    """Another user's jobs: one waiting at the top priority whenever none of the job's groups is waiting."""

    def __init__(self, lab: SlurmLab, other: Account, filler_s: int) -> None:
        self.lab, self.other, self.filler_s = lab, other, filler_s
        self.jobs: list[str] = []

    def submit(self) -> str:
        out = self.lab.cluster.cli().run(
            "sbatch", "--parsable", f"--uid={self.other.name}", f"--gid={self.other.gid}", "--priority=TOP",
            "--nodes=1", "--exclusive", f"--exclude={self.lab.head}", "--time=10", "--output=/dev/null",
            "--chdir=/tmp", "--job-name=busy", f"--wrap=sleep {self.filler_s}",
        )  # fmt: skip
        job = out.strip().split(";")[0]
        self.jobs.append(job)
        return job

    def tick(self, states: dict[str, str], ours_waiting: bool) -> None:
        if not ours_waiting and not any(states.get(j) == "PENDING" for j in self.jobs):
            self.submit()

    def cancel(self) -> None:
        for job in self.jobs:
            try:
                self.lab.cluster.cli().run("scancel", job)
            except SlurmError:
                pass


class Sampler(threading.Thread):
    """Every second: each Slurm job's state (the groups' and the other user's), and the busy queue kept up."""

    def __init__(self, lab_run: LabRun, busy: BusyQueue) -> None:
        super().__init__(daemon=True)
        self.lab_run, self.busy = lab_run, busy
        self.samples: list[tuple[float, dict[str, str]]] = []
        self.stop = threading.Event()
        self.errors: list[str] = []

    def states(self) -> dict[str, str]:
        out = self.lab_run.lab.cluster.cli().run("squeue", "--noheader", "--states=all", "-o", "%i %T")
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def run(self) -> None:
        assert self.lab_run.sub is not None
        groups = {str(j) for j in self.lab_run.sub.groups.values()}
        while not self.stop.wait(1.0):
            try:
                states = self.states()
            except SlurmError as e:
                self.errors.append(str(e))
                continue
            self.samples.append((time.time(), states))
            self.busy.tick(states, any(states.get(j) in WAITING for j in groups))


def waits(samples: list[tuple[float, dict[str, str]]], job: str) -> list[tuple[float, float]]:
    """(from, to) of every stretch in which `job` was waiting in the queue, as sampled."""
    out, since = [], None
    for t, states in samples:
        waiting = states.get(job) in WAITING
        if waiting and since is None:
            since = t
        elif not waiting and since is not None:
            out.append((since, t))
            since = None
    if since is not None:
        out.append((since, samples[-1][0]))
    return out


def commits(run_dir: Path, group: int) -> list[StepRecord]:
    return [r for r in read_steps(RunPaths(run_dir).steps(group)) if r.committed]


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch within [start, end] with none of `times` in it."""
    inside = sorted(t for t in times if start <= t <= end)
    edges = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(edges))


def renewal_times(run_dir: Path, group: int) -> list[float]:
    path = run_dir / RENEWAL_DIR / f"g{group}.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return [float(r["t"]) for r in rows if r.get("event") == "requeued"]


def absences(
    run_dir: Path, sub_groups: dict[int, str], samples: list[tuple[float, dict[str, str]]], kill: tuple[int, float]
) -> list[dict[str, Any]]:
    """One row per time a group left: why, its queue wait, when it committed again, and its peers meanwhile."""
    own = {g: commits(run_dir, g) for g in sub_groups}
    # An absence still open when the run ended (the test stops the job once every group is back) is
    # judged up to the run's last commit, and says so.
    run_end = max((r.t for rs in own.values() for r in rs), default=time.time())
    rows = []
    for g, job in sub_groups.items():
        left_at = [(kill[1], "kill")] if kill[0] == g else []
        left_at += [(t, "renewal") for t in renewal_times(run_dir, g)]
        for t, why in sorted(left_at):
            wait = next(((a, b) for a, b in waits(samples, job) if b >= t), None)
            back = next((r for r in own[g] if r.t > t and r.attempt != _attempt_at(own[g], t)), None)
            end = back.t if back else run_end
            peers = {o: longest_gap([r.t for r in own[o]], t, end) for o in sub_groups if o != g} if end > t else {}
            rows.append(
                {
                    "group": g,
                    "why": why,
                    "left": t,
                    "queue_wait_s": round(wait[1] - max(wait[0], t), 1) if wait else None,
                    "commits_again_after_s": round(end - t, 1) if back else None,
                    "healed_from": back.healed_from if back else None,
                    "run_ended_first": back is None,
                    "peers_committing_throughout": sum(gap < 10.0 for gap in peers.values()) if peers else None,
                    "peers_longest_gap_s": {str(o): round(v, 1) for o, v in peers.items()},
                }
            )
    return sorted(rows, key=lambda r: r["left"])


def _attempt_at(records: list[StepRecord], t: float) -> int | None:
    before = [r for r in records if r.t <= t]
    return before[-1].attempt if before else None


def measure(folder: Path, filler_s: int, time_min: int, stall_limit_s: float) -> tuple[dict[str, Any], bool]:
    settings = LabSettings(
        compute_nodes=GROUPS + 1,
        gpus_per_node=1,
        health=HealthConfig(hang_timeout_s=15.0, poll_interval_s=0.5, probe_deadline_s=2.0),
        restart=RestartConfig(budget_per_group=20, crash_loop_max=10),
    )
    with throwaway_user("llbusy") as other, running_lab(folder / "lab", settings) as lab:
        cfg = lab_job_config(lab, folder / "run", name="busy", steps=10**7, groups=GROUPS, step_sleep_s=0.2)
        cfg["restart"]["in_job"] = 0  # a killed trainer goes through the queue, as a bad node's group does
        cfg["slurm"]["time"] = str(time_min)
        # Spacing above the queue wait and a heal: a renewed group is back before the next one is warned.
        cfg["slurm"]["renewal"] = {"margin_s": 20, "spacing_s": filler_s + 30}
        cfg["torchft"] = {"timeout_s": 10, "quorum_timeout_s": 10, "connect_timeout_s": 10, "pg_timeout_s": 5}
        path = folder / "busy.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        run = LabRun(lab, load_job(path), path)
        busy = BusyQueue(lab, other, filler_s)
        t0 = time.time()
        sub = run.submit()
        run_dir = Path(sub.run_dir)
        groups = {g: str(j) for g, j in sub.groups.items()}
        sampler = Sampler(run, busy)
        try:
            run.wait_all_committing(300)
            sampler.start()
            wait_until(lambda: any(s.get(j) == "PENDING" for _, s in sampler.samples[-1:] for j in busy.jobs), 60,
                       "another user's job waiting in the queue")  # fmt: skip
            print(
                f"busy_queue: every group trains; the queue is busy ({len(busy.jobs)} jobs of {other.name})", flush=True
            )
            victim = 0
            t_kill = time.time()
            run.fault("kill", victim, recovery_timeout=filler_s + 180)
            print(f"busy_queue: group {victim} killed and back ({time.time() - t_kill:.0f} s)", flush=True)

            def renewed_and_back() -> bool:
                rows = absences(run_dir, groups, sampler.samples, (victim, t_kill))
                renewals = [r for r in rows if r["why"] == "renewal"]
                return {r["group"] for r in renewals if r["commits_again_after_s"] is not None} == set(groups)

            wait_until(renewed_and_back, time_min * 60 * 3 + 600, "every group renewed once and committed again")
            states = run.finish(600)
        finally:
            sampler.stop.set()
            sampler.join(10)
            busy.cancel()
        report = run.report()
        rows = absences(run_dir, groups, sampler.samples, (victim, t_kill))
        every = sorted(r.t for g in groups for r in commits(run_dir, g))
        stall = longest_gap(every, every[0], every[-1]) if every else None
        healed = all(str(r["healed_from"]).startswith("peer") for r in rows if not r["run_ended_first"])
        ok = report["steps_lost"] == 0 and stall is not None and stall <= stall_limit_s and healed
        result = {
            "setup": {
                "groups": GROUPS,
                "compute_nodes": GROUPS + 1,
                "filler_s": filler_s,
                "time_limit_min": time_min,
                "renewal": cfg["slurm"]["renewal"],
                "other_users_jobs": len(busy.jobs),
            },
            "wall_s": round(time.time() - t0, 1),
            "absences": rows,
            "no_group_committing_longest_s": None if stall is None else round(stall, 1),
            "steps_committed": report["steps_committed"],
            "steps_lost": report["steps_lost"],
            "weights_identical": report["weights_identical"],
            "end_states": states,
            "sampler_errors": sampler.errors[:5],
            "ok": ok,
        }
        plot(run_dir, groups, rows, sampler.samples, busy.jobs, t0)
        return result, ok


def plot(
    run_dir: Path, groups: dict[int, str], rows: list[dict[str, Any]], samples: Any, fillers: list[str], t0: float
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3.2))
    for g in groups:
        ts = [r.t - t0 for r in commits(run_dir, g)]
        ax.plot(ts, [g] * len(ts), "|", color="tab:green", markersize=8)
        for a, b in waits(samples, groups[g]):
            ax.plot([a - t0, b - t0], [g, g], color="tab:red", linewidth=6, alpha=0.5)
    for i, job in enumerate(fillers):
        running = [t - t0 for t, s in samples if s.get(job) == "RUNNING"]
        if running:
            ax.plot([min(running), max(running)], [GROUPS + 0.2 * (i % 3)] * 2, color="tab:gray", linewidth=3)
    for r in rows:
        ax.axvline(r["left"] - t0, color="tab:orange" if r["why"] == "kill" else "tab:blue", linewidth=0.8)
    ax.set_yticks([*groups, GROUPS], [f"group {g}" for g in groups] + ["other user"])
    ax.set_xlabel("seconds after submit (green: commits; red: waiting in the queue; lines: kill / renewal)")
    fig.tight_layout()
    out = RESULTS / "busy_queue.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filler-s", type=int, default=60, help="how long each of the other user's jobs holds a node")
    ap.add_argument("--time-min", type=int, default=5, help="the groups' time limit (slurm.time), minutes")
    ap.add_argument("--stall-limit-s", type=float, default=30.0, help="fail if no group committed for this long")
    ap.add_argument("--dir", type=Path, default=Path("build/busy-queue"))
    args = ap.parse_args(argv)
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    result, ok = measure(args.dir.resolve(), args.filler_s, args.time_min, args.stall_limit_s)
    path = write_result("busy_queue", result)
    for r in result["absences"]:
        if r["run_ended_first"]:
            print(
                f"group {r['group']} {r['why']:8s} queue wait {r['queue_wait_s']} s; the run ended before it was back"
            )
            continue
        print(
            f"group {r['group']} {r['why']:8s} queue wait {r['queue_wait_s']} s, commits again after "
            f"{r['commits_again_after_s']} s from {r['healed_from']}, peers committing throughout "
            f"{r['peers_committing_throughout']} of {GROUPS - 1}"
        )
    print(
        f"no group committing at most {result['no_group_committing_longest_s']} s; steps lost "
        f"{result['steps_lost']}, weights identical {result['weights_identical']}; wrote {path}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
