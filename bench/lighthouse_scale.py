"""torchft's Lighthouse at scale (#31): 16 to 512 replica groups heartbeating and taking a quorum every step,
one group killed, or hung, at a time; `make scale-lighthouse`.

One real Lighthouse (lamplighter's lighthouse/main.py with the config's defaults: heartbeat timeout 500 ms,
quorum tick 20 ms, join timeout 1 s) and N torch-free replica groups (lab/scale_replica.py: torchft's
ManagerServer and ManagerClient through the native module, one quorum and one should_commit a step, no
model, no collectives), packed several to a process except the groups that are killed, which run alone.
Per N:

  formation   from starting the replica processes to every group holding one quorum of all N
  steady      time each step spends in the quorum call (the quorum is a barrier across all groups every
              step), commits per group per second, quorum changes nobody caused, and the Lighthouse's CPU
              (cores), RSS and log bytes per second over a window
  kill        per round: SIGKILL one lone group 100 ms before the groups ask for their next quorum (mid-step,
              late: the replicas run no collective that would fail, so a kill early in a step is absorbed
              by the step and only the Lighthouse's part is measured); the time until every survivor holds a quorum without it,
              and each survivor's stall (its longest gap between commits around the kill, less its usual
              step period); then the group is started again (a new member, as a requeued group is) and
              the time until every group holds a quorum of N again, and the survivors' stall then
  hang        the same with SIGSTOP (a hung process: it neither heartbeats nor answers, and its sockets stay
              open), then SIGKILL once the survivors hold a quorum without it (as lamplighter ends a hung
              group before it starts it again), and the group started again

The replicas step every 0.5 s: below the join timeout. The second part (--arm) runs 16 and 64 groups with
2-s steps, longer than the join timeout, at the config's join timeout (1 s) and at 3 s: with the config's,
one group left out of a quorum (a late start, a group back after a fault) is enough for every later quorum
to form from just over half of the groups (lighthouse.rs: a left-out member re-joins the moment the quorum
that left it out is sent, so by the next round it has waited a whole step, the join timeout has passed,
and the quorum is cut as soon as more than half have arrived, leaving the late half out again).

Not measured here, because the replicas do not do it: the survivors' failed collective before they ask
for a quorum (pg_timeout_s), process-group setup after a quorum change, the heal's transfer.

Writes bench/results/lighthouse_scale.json (or --out) and a PNG beside it; the run's files (event logs,
Lighthouse log) are in --dir.

    python -m bench.lighthouse_scale [--groups 4,16,64,128,256,512] [--kills 3] [--hangs 2] [--arm 16,64]
        [--dir build/lighthouse-scale]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.results_io import RESULTS, environment
from lamplighter.configs.schema import LighthouseConfig, TorchftConfig
from lamplighter.lighthouse.spawn import Lighthouse
from lamplighter.rundir.contract import write_text_atomic
from lamplighter.system.process_tree import kill_tree

REPLICA_MODULE = "lamplighter.lab.scale_replica"
KILL_LEAD_S = 0.1  # a group dies (or hangs) this long before the others ask for their next quorum
FAULTS = {"kill": signal.SIGKILL, "hang": signal.SIGSTOP}


@dataclass(frozen=True)
class Step:
    """One step of one group, as lab/scale_replica.py logs it."""

    group: int
    t0: float  # quorum asked
    t1: float  # quorum returned
    t2: float  # should_commit returned
    committed: bool
    quorum_id: int
    size: int  # the quorum's replica world size
    heal: bool


def parse_event(line: str) -> Step | dict[str, Any] | None:
    """A step, another event (ready, err) as its dict, or None for a line that is not whole JSON."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    if "qid" in rec:
        return Step(
            group=int(rec["g"]),
            t0=float(rec["t0"]),
            t1=float(rec["t1"]),
            t2=float(rec["t2"]),
            committed=bool(rec["c"]),
            quorum_id=int(rec["qid"]),
            size=int(rec["n"]),
            heal=bool(rec["heal"]),
        )
    return rec


@dataclass
class Events:
    """Every replica file of a run, read as it grows: steps per group, ready and error events."""

    folder: Path
    steps: dict[int, list[Step]] = field(default_factory=dict)
    others: list[dict[str, Any]] = field(default_factory=list)
    _offsets: dict[Path, int] = field(default_factory=dict)

    def poll(self) -> None:
        for path in sorted(self.folder.glob("replica-*.jsonl")):
            start = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
            whole = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
            self._offsets[path] = start + len(whole)
            for line in whole.decode(errors="replace").splitlines():
                ev = parse_event(line)
                if isinstance(ev, Step):
                    self.steps.setdefault(ev.group, []).append(ev)
                elif ev is not None:
                    self.others.append(ev)


def quorum_reached(steps: list[Step], after: float, size: int) -> float | None:
    """When the group first held a quorum of `size` that it asked for after `after` (its t1), or None."""
    for s in steps:
        if s.t0 >= after and s.size == size:
            return s.t1
    return None


def commit_gap(steps: list[Step], at: float, until: float) -> float | None:
    """The group's longest gap between consecutive commits from its last commit before `at` to its first
    after `until` (when it held the new quorum): what the change cost it, with one usual step in it."""
    times = sorted(s.t2 for s in steps if s.committed)
    before = [t for t in times if t <= at]
    after = [t for t in times if t > until]
    if not before or not after:
        return None
    span = [t for t in times if before[-1] <= t <= after[0]]
    return max(b - a for a, b in itertools.pairwise(span))


def step_period(steps: list[Step], t_from: float, t_to: float) -> float | None:
    """The median gap between the group's consecutive commits inside [t_from, t_to]."""
    times = [s.t2 for s in steps if s.committed and t_from <= s.t2 <= t_to]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return statistics.median(gaps) if gaps else None


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; values must not be empty."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float | int] | None:
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "p90": percentile(values, 0.9),
        "max": max(values),
        "min": min(values),
        "n": len(values),
    }


def change_measures(
    steps: dict[int, list[Step]], groups: Iterable[int], at: float, size: int, period: dict[int, float]
) -> dict[str, Any]:
    """After a change of membership at `at`: when each of `groups` held a quorum of `size`, and its stall
    (its commit gap around `at` less its usual period). Times in seconds after `at`."""
    reached: list[float] = []
    stalls: list[float] = []
    missing: list[int] = []
    for g in groups:
        own = steps.get(g, [])
        t = quorum_reached(own, at, size)
        if t is None:
            missing.append(g)
            continue
        reached.append(t - at)
        gap = commit_gap(own, at, t)
        if gap is not None and g in period:
            stalls.append(max(0.0, gap - period[g]))
    return {
        "quorum_after_s": summary(reached),
        "survivor_stall_s": summary(stalls),
        "groups_without_that_quorum": missing,
    }


def churn(steps: dict[int, list[Step]], t_from: float, t_to: float) -> dict[str, Any]:
    """Quorum changes per second and the sizes of the quorums the groups held, over [t_from, t_to] (by t1)."""
    held = [s for own in steps.values() for s in own if t_from <= s.t1 <= t_to]
    ids = {s.quorum_id for s in held}
    sizes = {s.quorum_id: s.size for s in held}
    span = t_to - t_from
    return {
        "quorum_changes_per_s": max(0, len(ids) - 1) / span,
        "quorum_sizes": summary([float(v) for v in sizes.values()]),
        "groups_holding_a_quorum": len({s.group for s in held}),
        "commits_per_group_s": sum(s.committed for s in held) / max(1, len(steps)) / span,
        "heals_per_s": sum(s.heal for s in held) / span,  # each a state transfer from a peer in real torchft
    }


def quorum_ids_between(steps: dict[int, list[Step]], t_from: float, t_to: float) -> list[int]:
    return sorted({s.quorum_id for own in steps.values() for s in own if t_from <= s.t0 <= t_to})


def packs(groups: int, alone: int, per_process: int) -> list[list[int]]:
    """Groups 0..alone-1 one to a process (they are killed), the rest `per_process` to a process."""
    rest = list(range(alone, groups))
    return [[g] for g in range(min(alone, groups))] + [
        rest[i : i + per_process] for i in range(0, len(rest), per_process)
    ]


def memory_mb(pid: int) -> dict[str, float]:
    """RSS and PSS (shared pages split among the processes mapping them: what adds up) in MB."""
    m = psutil.Process(pid).memory_full_info()
    return {"rss_mb": m.rss / 1e6, "pss_mb": m.pss / 1e6}


def maps_torch(pid: int) -> bool:
    """Whether the process has any of torch's libraries mapped."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


class NotReached(RuntimeError):
    """The groups did not get where a wait expected them within its time."""


class Run:
    """One Lighthouse and N replica groups, with the handles to hurt them and the events they log."""

    def __init__(
        self,
        folder: Path,
        n: int,
        alone: int,
        per_process: int,
        step_s: float,
        heartbeat_ms: int,
        join_timeout_ms: int | None = None,
    ) -> None:
        self.folder = folder
        self.n = n
        self.step_s = step_s
        self.heartbeat_ms = heartbeat_ms
        self.cfg = LighthouseConfig() if join_timeout_ms is None else LighthouseConfig(join_timeout_ms=join_timeout_ms)
        self.ft = TorchftConfig()
        self.lighthouse = Lighthouse(self.cfg, folder / "lighthouse.log")
        self.events = Events(folder)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}  # first group of the process -> the process
        self.layout = packs(n, alone, per_process)
        self._spawned = 0

    def start_lighthouse(self) -> None:
        self.lighthouse.start(time.monotonic())
        self.lighthouse.wait_ready(30)

    def spawn(self, groups: list[int]) -> subprocess.Popen[bytes]:
        self._spawned += 1
        name = f"replica-{groups[0]}-{self._spawned}"
        env = {**os.environ, "RUST_LOG": "warn"}  # the replicas' own logs are not what is measured
        with open(self.folder / f"{name}.log", "wb") as log:
            p = subprocess.Popen(
                [sys.executable, "-m", REPLICA_MODULE, "--lighthouse", self.lighthouse.address]
                + ["--groups", ",".join(map(str, groups)), "--out", str(self.folder / f"{name}.jsonl")]
                + ["--step-s", str(self.step_s), "--heartbeat-ms", str(self.heartbeat_ms)]
                + ["--quorum-timeout-s", str(self.ft.quorum_timeout_s), "--commit-timeout-s", str(self.ft.timeout_s)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self.procs[groups[0]] = p
        return p

    def kill(self, group: int) -> None:
        """SIGKILL the process of `group` (it runs alone; a stopped one too) and reap it."""
        p = self.procs.pop(group)
        p.kill()
        p.wait()

    def fault_before_next_quorum(self, kind: str, group: int, watch: int, q_median: float, lead_s: float) -> float:
        """Kill or hang `group` `lead_s` before the groups ask for their next quorum (they step in lockstep: the
        quorum is a barrier), as a group fails mid-step; returns when (time.time()). `watch`: a group whose steps
        tell the phase. A fault at a random phase would mostly fall in the replicas' sleep and be absorbed there
        (no collective fails here), which measures the phase, not the Lighthouse."""
        self.events.poll()
        seen = len(self.events.steps[watch])
        self.wait("stepping", lambda: len(self.events.steps[watch]) > seen, 30)
        last = self.events.steps[watch][-1]  # written at t2, just as its next quorum was asked
        target = last.t2 + q_median + self.step_s - lead_s
        time.sleep(max(0.0, target - time.time()))
        t = time.time()
        if kind == "kill":
            self.kill(group)
        else:
            self.procs[group].send_signal(FAULTS[kind])  # stopped, not gone: stop() and kill() still end it
        return t

    def wait(self, what: str, ready: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self.events.poll()
            if ready():
                return
            dead = [g for g, p in self.procs.items() if p.poll() is not None]  # a stopped process has not exited
            if dead:
                raise RuntimeError(f"{self.n} groups: replica processes of groups {dead} exited while {what}")
            if time.monotonic() > deadline:
                raise NotReached(f"{self.n} groups: not {what} within {timeout_s:g} s (see {self.folder})")
            time.sleep(0.2)

    def all_hold(self, groups: Iterable[int], after: float, size: int) -> Callable[[], bool]:
        gs = list(groups)
        return lambda: all(quorum_reached(self.events.steps.get(g, []), after, size) is not None for g in gs)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill_tree([p])
        self.lighthouse.kill()
        self.events.poll()


def measure_size(
    folder: Path,
    n: int,
    kills: int,
    per_process: int,
    step_s: float,
    window_s: float,
    join_timeout_ms: int | None = None,
    formation_timeout_s: float | None = None,
    heartbeat_ms: int | None = None,
    hangs: int = 0,
) -> dict[str, Any]:
    shutil.rmtree(folder, ignore_errors=True)  # this tool's own output: never read an earlier run's events
    folder.mkdir(parents=True)
    heartbeat = heartbeat_ms or TorchftConfig().heartbeat_interval_ms
    # The groups hurt run alone in their processes; with fewer groups than rounds, they take turns.
    alone = min(kills + hangs, n)
    run = Run(folder, n, alone, per_process, step_s, heartbeat, join_timeout_ms)
    load_before = os.getloadavg()
    row: dict[str, Any] = {
        "groups": n,
        "processes": len(run.layout),
        "kills": kills,
        "hangs": hangs,
        "step_s": step_s,
        "join_timeout_ms": run.cfg.join_timeout_ms,
    }
    try:
        run.start_lighthouse()
        assert run.lighthouse.popen is not None
        lh_pid = run.lighthouse.popen.pid
        t_spawn = time.time()
        for groups in run.layout:
            run.spawn(groups)
        timeout = formation_timeout_s if formation_timeout_s is not None else 30 + 0.1 * n
        try:
            run.wait("all in one quorum", run.all_hold(range(n), t_spawn, n), timeout)
        except NotReached:
            # The groups step, but in quorums of part of them that change every step: what, over the last 10 s.
            row["formed"] = False
            row["formation_s"] = None
            row["unformed"] = churn(run.events.steps, time.time() - 10, time.time())
            return row
        row["formed"] = True
        row["formation_s"] = max(quorum_reached(run.events.steps[g], t_spawn, n) or 0.0 for g in range(n)) - t_spawn

        time.sleep(max(3.0, 3 * step_s))  # settled: every group has taken a few steps in the full quorum
        w0, cpu0, log0 = time.time(), cpu_s(lh_pid), os.path.getsize(run.folder / "lighthouse.log")
        replica_pids = [p.pid for p in run.procs.values()]
        rep0 = sum(cpu_s(pid) for pid in replica_pids)
        lh_rss: list[float] = []
        while time.time() < w0 + window_s:
            lh_rss.append(memory_mb(lh_pid)["rss_mb"])
            time.sleep(1.0)
        w1, cpu1, log1 = time.time(), cpu_s(lh_pid), os.path.getsize(run.folder / "lighthouse.log")
        rep1 = sum(cpu_s(pid) for pid in replica_pids)
        solo = run.procs[0].pid if kills + hangs else None
        packed = [run.procs[gs[0]].pid for gs in run.layout if len(gs) > 1]
        packed_mem = [memory_mb(pid) for pid in packed]
        packed_groups = sum(len(gs) for gs in run.layout if len(gs) > 1)
        run.events.poll()
        in_window = [s for own in run.events.steps.values() for s in own if w0 <= s.t0 <= w1]
        period = {g: p for g in range(n) if (p := step_period(run.events.steps.get(g, []), w0, w1)) is not None}
        q_all = [s.t1 - s.t0 for s in in_window]
        q_median = statistics.median(q_all) if q_all else 0.0
        row["steady"] = {
            "window_s": w1 - w0,
            "quorum_call_s": summary([s.t1 - s.t0 for s in in_window]),
            "commits_per_group_s": sum(
                1 for own in run.events.steps.values() for s in own if s.committed and w0 <= s.t2 <= w1
            )
            / n
            / (w1 - w0),
            "step_period_s": summary(list(period.values())),
            "quorum_ids": quorum_ids_between(run.events.steps, w0, w1),
            "lighthouse_cpu_cores": (cpu1 - cpu0) / (w1 - w0),
            "lighthouse_rss_mb": max(lh_rss),
            "lighthouse_log_bytes_per_s": (log1 - log0) / (w1 - w0),
            "replicas_cpu_cores": (rep1 - rep0) / (w1 - w0),
            "replica_alone_mb": memory_mb(solo) if solo else None,
            "replica_alone_maps_torch": maps_torch(solo) if solo else None,
            "replica_packed_pss_mb_per_group": sum(m["pss_mb"] for m in packed_mem) / packed_groups
            if packed_groups
            else None,
            "replica_packed_rss_mb_per_group": sum(m["rss_mb"] for m in packed_mem) / packed_groups
            if packed_groups
            else None,
        }

        rounds = []
        # Each victim runs alone in its process; the first `kills` are killed, the next `hangs` hung.
        for i, kind in enumerate(["kill"] * kills + ["hang"] * hangs):
            victim = i % alone
            survivors = [g for g in range(n) if g != victim]
            t_fault = run.fault_before_next_quorum(kind, victim, survivors[0], q_median, KILL_LEAD_S)
            run.wait(f"a quorum without group {victim} ({kind})", run.all_hold(survivors, t_fault, n - 1), 30)
            if kind == "hang":
                run.kill(victim)  # as lamplighter ends a hung group once it sees the hang, before its restart
            time.sleep(2 + 2 * step_s)
            t_back = time.time()
            run.spawn([victim])
            try:
                run.wait(f"a quorum with group {victim} back", run.all_hold(range(n), t_back, n), 30 + 0.05 * n)
            except NotReached:  # the groups step on in quorums of part of them: say so, and stop hurting them
                rounds.append(
                    {
                        "victim": victim,
                        "fault": kind,
                        "rejoined": False,
                        "after": churn(run.events.steps, t_back, time.time()),
                    }
                )
                break
            time.sleep(2 + 2 * step_s)
            run.events.poll()
            back = run.events.steps[victim]
            first_commit = next((s.t2 for s in back if s.t0 >= t_back and s.committed), None)
            rounds.append(
                {
                    "victim": victim,
                    "fault": kind,
                    "rejoined": True,
                    kind: change_measures(run.events.steps, survivors, t_fault, n - 1, period),
                    "rejoin": change_measures(run.events.steps, survivors, t_back, n, period),
                    "rejoin_to_first_commit_s": None if first_commit is None else first_commit - t_back,
                    "rejoin_healed": any(s.heal for s in back if s.t0 >= t_back),
                }
            )
        row["rounds"] = rounds
        t_end = time.time()
        row["quorum_changes"] = len(quorum_ids_between(run.events.steps, w0, t_end)) - 1
        row["quorum_changes_expected"] = 2 * len(rounds)  # one when a group fails, one when it is back
        row["errors"] = sum(1 for e in run.events.others if "err" in e)
    finally:
        run.stop()
    row["load_avg_1m"] = [load_before[0], os.getloadavg()[0]]
    return row


def headline(row: dict[str, Any]) -> dict[str, Any]:
    """The per-size numbers #31's report asks for: quorum_s (a step's quorum call, median at steady state)
    and survivor_stall_kill_s and _hang_s (median over rounds of the survivors' median stall)."""

    def med(key: str, part: str) -> float | None:
        vals = [
            r[part][key]["median"] for r in row["rounds"] if r["rejoined"] and part in r and r[part][key] is not None
        ]
        return statistics.median(vals) if vals else None

    if not row.get("formed", True):
        return {
            "groups": row["groups"],
            "formed": False,
            "quorum_s": None,
            "survivor_stall_kill_s": None,
            "quorum_after_kill_s": None,
            "survivor_stall_hang_s": None,
            "quorum_after_hang_s": None,
            "quorum_after_rejoin_s": None,
            "lighthouse_cpu_cores": None,
            "lighthouse_rss_mb": None,
            "replicas_cpu_cores": None,
        }
    q = row["steady"]["quorum_call_s"]
    return {
        "groups": row["groups"],
        "formed": True,
        "quorum_s": q["median"] if q else None,
        "survivor_stall_kill_s": med("survivor_stall_s", "kill"),
        "quorum_after_kill_s": med("quorum_after_s", "kill"),
        "survivor_stall_hang_s": med("survivor_stall_s", "hang"),
        "quorum_after_hang_s": med("quorum_after_s", "hang"),
        "quorum_after_rejoin_s": med("quorum_after_s", "rejoin"),
        "lighthouse_cpu_cores": row["steady"]["lighthouse_cpu_cores"],
        "lighthouse_rss_mb": row["steady"]["lighthouse_rss_mb"],
        "replicas_cpu_cores": row["steady"]["replicas_cpu_cores"],
    }


def describe(row: dict[str, Any]) -> str:
    n = row["groups"]
    if not row.get("formed", True):
        u = row["unformed"]
        sizes = u["quorum_sizes"]
        return (
            f"{n:4d} groups: never all in one quorum; {u['quorum_changes_per_s']:.2f} quorum changes/s, "
            f"quorums of {sizes['min']:.0f}-{sizes['max']:.0f} groups"
            if sizes
            else f"{n:4d} groups: no quorum"
        )
    h = headline(row)

    def ms(key: str) -> str:
        return "-" if h[key] is None else f"{h[key] * 1000:.0f} ms"

    return (
        f"{n:4d} groups: formation {row['formation_s']:.1f} s, quorum call {ms('quorum_s')}, "
        f"kill -> quorum {ms('quorum_after_kill_s')}, stall {ms('survivor_stall_kill_s')}, "
        f"hang -> quorum {ms('quorum_after_hang_s')}, stall {ms('survivor_stall_hang_s')}, "
        f"Lighthouse {h['lighthouse_cpu_cores']:.2f} cores {h['lighthouse_rss_mb']:.0f} MB"
    )


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = [headline(r) for r in rows]
    ns = [h["groups"] for h in heads]

    def ms(key: str) -> list[float]:
        return [float("nan") if h[key] is None else h[key] * 1000 for h in heads]

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(ns, ms("quorum_after_kill_s"), marker="o", label="kill -> every survivor in the next quorum")
    a.plot(ns, ms("survivor_stall_kill_s"), marker="s", label="survivors' stall (kill)")
    a.plot(ns, ms("survivor_stall_hang_s"), marker="D", label="survivors' stall (hang)")
    a.plot(ns, ms("quorum_after_rejoin_s"), marker="^", label="restart -> every group in the quorum of N")
    a.plot(ns, ms("quorum_s"), marker="x", label="a step's quorum call, steady (median)")
    a.set_xscale("log", base=2)
    a.set_xlabel("replica groups")
    a.set_ylabel("ms (median over rounds)")
    a.set_title("torchft Lighthouse: one group killed or hung")
    a.legend(fontsize=7)
    nan = float("nan")
    b.plot(
        ns,
        [nan if h["lighthouse_cpu_cores"] is None else h["lighthouse_cpu_cores"] for h in heads],
        marker="o",
        color="tab:red",
        label="Lighthouse CPU (cores)",
    )
    b.plot(
        ns,
        [nan if h["replicas_cpu_cores"] is None else h["replicas_cpu_cores"] for h in heads],
        marker=".",
        linestyle="--",
        color="tab:orange",
        label="all replica groups' CPU (cores; the machine has 2)",
    )
    b.legend(fontsize=7, loc="upper left")
    b.set_xscale("log", base=2)
    b.set_xlabel("replica groups")
    b.set_ylabel("CPU, cores")
    b2 = b.twinx()
    b2.plot(
        ns,
        [nan if h["lighthouse_rss_mb"] is None else h["lighthouse_rss_mb"] for h in heads],
        marker="s",
        color="tab:blue",
    )
    b2.set_ylabel("Lighthouse RSS, MB", color="tab:blue")
    b.set_title("Lighthouse at steady state")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", default="4,16,64,128,256,512", help="comma-separated group counts")
    ap.add_argument("--kills", type=int, default=3, help="kill-and-restart rounds per group count")
    ap.add_argument(
        "--hangs", type=int, default=2, help="hang-kill-and-restart rounds per group count (after the kills)"
    )
    ap.add_argument("--per-process", type=int, default=8, help="groups sharing one replica process")
    ap.add_argument(
        "--step-s", type=float, default=0.5, help="each replica's step (a sleep), below the join timeout (see --arm)"
    )
    ap.add_argument(
        "--arm",
        default="16,64",
        help="group counts of the second part: steps of --arm-step-s, longer than the Lighthouse's join timeout, "
        "at the config's join timeout and at --arm-join-timeout-ms ('' skips it)",
    )
    ap.add_argument("--arm-step-s", type=float, default=2.0)
    ap.add_argument("--arm-join-timeout-ms", type=int, default=3000)
    ap.add_argument("--window-s", type=float, default=10.0, help="the steady-state window")
    ap.add_argument("--join-timeout-ms", type=int, default=None, help="the Lighthouse's (default: the config's)")
    ap.add_argument("--heartbeat-ms", type=int, default=None, help="the Managers' (default: the config's, 100)")
    ap.add_argument("--formation-timeout-s", type=float, default=None, help="default: 30 s + 0.1 s a group")
    ap.add_argument("--dir", type=Path, default=Path("build/lighthouse-scale"))
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNG from --out's rows, measuring nothing")
    ap.add_argument("--out", type=Path, default=RESULTS / "lighthouse_scale.json")
    args = ap.parse_args(argv)
    if args.plot_only:
        plot(json.loads(args.out.read_text())["rows"], args.out.with_suffix(".png"))
        return 0
    rows = []
    for n in [int(x) for x in args.groups.split(",")]:
        t = time.monotonic()
        row = measure_size(
            args.dir / f"groups-{n}",
            n,
            args.kills,
            args.per_process,
            args.step_s,
            args.window_s,
            args.join_timeout_ms,
            args.formation_timeout_s,
            args.heartbeat_ms,
            args.hangs,
        )
        rows.append(row)
        print(f"{describe(row)} ({time.monotonic() - t:.0f} s)", flush=True)
    arm = []
    for n in [int(x) for x in args.arm.split(",") if x.strip()]:
        for jt in (None, args.arm_join_timeout_ms):
            t = time.monotonic()
            name = f"arm-{n}-jt{jt or 'default'}"
            row = measure_size(args.dir / name, n, 1, args.per_process, args.arm_step_s, 5.0, jt, 25.0)
            arm.append(row)
            print(
                f"{describe(row)} [step {args.arm_step_s:g} s, join timeout {row['join_timeout_ms']} ms] "
                f"({time.monotonic() - t:.0f} s)",
                flush=True,
            )
    ft = TorchftConfig()
    lh = LighthouseConfig() if args.join_timeout_ms is None else LighthouseConfig(join_timeout_ms=args.join_timeout_ms)
    result = {
        "name": args.out.stem,
        "environment": environment(),
        "settings": {
            "lighthouse": {
                "heartbeat_timeout_ms": lh.heartbeat_timeout_ms,
                "quorum_tick_ms": lh.quorum_tick_ms,
                "join_timeout_ms": lh.join_timeout_ms,
                "min_replicas": lh.min_replicas,
                "rust_log": os.environ.get("RUST_LOG", "(unset: info)"),
            },
            "replica": {
                "kind": "torch-free (lab/scale_replica.py): torchft's ManagerServer and ManagerClient via the "
                "native module, one quorum and one should_commit a step, no collectives",
                "heartbeat_interval_ms": args.heartbeat_ms or ft.heartbeat_interval_ms,
                "quorum_timeout_s": ft.quorum_timeout_s,
                "step_s": args.step_s,
                "groups_per_process": args.per_process,
                "killed_groups": "alone in their process (hung ones too)",
            },
            "kills_per_size": args.kills,
            "hangs_per_size": args.hangs,
        },
        "lighthouse": [headline(r) for r in rows],
        "rows": rows,
        # Steps longer than the join timeout: does one quorum of all groups ever form and hold?
        "step_over_join_timeout": [
            {
                "groups": r["groups"],
                "step_s": r["step_s"],
                "join_timeout_ms": r["join_timeout_ms"],
                "formed": r["formed"],
                "rejoined": all(x.get("rejoined", False) for x in r.get("rounds", [])) if r["formed"] else None,
                "unformed": r.get("unformed"),
                "row": r,
            }
            for r in arm
        ],
    }
    write_text_atomic(args.out, json.dumps(result, indent=2) + "\n", umask=True)
    plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
