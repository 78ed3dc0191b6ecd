"""One host daemon of a bare-metal cluster: its lease, the placer role when it wins it, and its trainers.

Each cycle: renew the lease (host_lease), campaign for the placer role and,
as placer, place every job's groups (placer); read this cluster's assignments
and run host_agent.decide on them, then carry its actions out. Trainers are
started with the same process handling as local mode (process_tree: a
session per rank, the whole tree killed), under `setpriv --pdeathsig KILL`,
so a daemon that dies takes its trainers with it instead of leaving them
running unfenced. When etcd cannot be read, the last assignments read are
kept: only the lease decides to fence, never a failed read.

Jobs are in etcd (`<root>/jobs/<job>/spec`: the validated config, as JSON);
each host writes it to `<state_dir>/<job>/job.json` for its trainers.

Every action (a trainer ended, killed or started, a failure reported, the host
taken out, a group moved by the placer, the placer role won) is one JSON line
in `<state_dir>/actions.jsonl` and in the job's `<run_dir>/actions.jsonl`, as
a Slurm node daemon writes them: `lamplighter why` and the demo's report read them.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lamplighter.bare.etcd_store import EtcdError, Store
from lamplighter.bare.hang_watch import JobHangWatch, lighthouse_address
from lamplighter.bare.host_agent import GroupHistory, GroupRef, HostAction, Trainer, decide
from lamplighter.bare.host_lease import HostLease
from lamplighter.bare.keys import Keys
from lamplighter.bare.placement import Assignment
from lamplighter.bare.placer import HostEntry, Placer
from lamplighter.configs.schema import JobConfig
from lamplighter.supervisor.gpu.faults import gpu_response
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.supervisor.local_launch import group_launch
from lamplighter.supervisor.process_tree import GroupProcesses, StartError
from lamplighter.supervisor.run_dir_actions import ACTIONS_FILE, append_line
from lamplighter.supervisor.trainer_proc import TrainerProc

log = logging.getLogger(__name__)

# GPU faults that take the host out: the hardware is at fault, so the group goes to another host (the same
# faults drain a Slurm node, supervisor/gpu/faults.py). A VM fault restarts the group here, a throttle is reported.
OUT_RESPONSE = "drain"
BARE_METAL = "bare metal"  # what an action line names in place of a Slurm job id


class GpuObserver(Protocol):
    def observe(self, now: float) -> list[GpuObservation]: ...
    def close(self) -> None: ...


def die_with_daemon(argv: Sequence[str]) -> list[str]:
    """The trainer gets SIGKILL when the daemon that started it dies (prctl PR_SET_PDEATHSIG, via util-linux)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise StartError("setpriv (util-linux) is missing: trainers would outlive a dead host daemon unfenced")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv]


@dataclass
class HostDaemon:
    store: Store
    keys: Keys
    me: str
    hosts: list[HostEntry]
    state_dir: Path
    clock: Callable[[], float]
    ttl_s: int = 3
    margin_s: float = 1.0
    python: str = sys.executable
    gpus: GpuObserver | None = None
    wall: Callable[[], float] = time.time  # progress (heartbeats, the Lighthouse) is in wall-clock time
    watches: dict[str, JobHangWatch] = field(default_factory=dict)  # job -> its hang check
    taken_out: str | None = None  # why this host is out (its key under out/), as last read
    placer_seen: str | None = None  # who held the placer role, as last read
    lease: HostLease = field(init=False)
    placer: Placer = field(init=False)
    jobs: dict[str, JobConfig] = field(default_factory=dict)
    assigned: dict[GroupRef, Assignment] = field(default_factory=dict)
    running: dict[GroupRef, tuple[int, GroupProcesses]] = field(default_factory=dict)  # -> (epoch, processes)
    history: dict[GroupRef, GroupHistory] = field(default_factory=dict)
    done: list[HostAction] = field(default_factory=list)  # every action taken, for status and tests
    unstarted: list[Trainer] = field(default_factory=list)  # failed starts (127) and hang kills (-9): exits
    _specs: dict[str, tuple[int, JobConfig]] = field(default_factory=dict)  # job -> (spec create revision, config)
    _journal_failed: set[Path] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.lease = HostLease(self.store, self.keys, self.me, self.ttl_s, {"host": self.me})
        self.placer = Placer(self.store, self.keys, self.me, self.ttl_s)

    def cycle(self) -> list[HostAction]:
        # Every etcd call before the kills has a deadline: on a cut link each member costs its whole timeout,
        # which can add up past the fence margin, and the fence is decided from the clock after the calls,
        # never from a reading taken before one that blocked.
        deadline, renew_first = self.lease.renewal_deadline(self.clock(), self.margin_s)
        if renew_first:
            with self.store.until(deadline, self.clock):
                self.lease.renew(self.clock())
        if not self.lease.fence_due(self.clock(), self.margin_s)[0]:
            with self.store.until(self.lease.fence_at(self.margin_s), self.clock):
                self._read()
                self._check_gpus()
                self._place()
        ended = self._reap()
        trainers = [Trainer(j, g, e, gp.popens[0].pid) for (j, g), (e, gp) in self.running.items()] + ended
        restart = {name: job.restart for name, job in self.jobs.items()}
        fence = self.lease.fence_due(self.clock(), self.margin_s)
        hung = {} if fence[0] else self._hung()
        d = decide(self.clock(), self.me, self.assigned, trainers, self.history, restart, fence, self.taken_out, hung)
        self.history = d.history
        with self.store.until(self.lease.fence_at(self.margin_s), self.clock):  # a report must not delay a kill
            for a in d.actions:
                self._do(a)
        self.done += d.actions
        if not renew_first:  # the lease had expired: its trainers are gone now, so the host may wait on etcd
            self.lease.renew(self.clock())
        return d.actions

    def _place(self) -> None:
        if self.placer_seen not in (None, self.me) and not self.placer.leading:
            # Another daemon holds the role: a campaign would cost 3 requests a cycle for nothing. Its key
            # going (its lease expired) shows in the next read, and this daemon campaigns in that cycle.
            return
        try:
            was = self.placer.leading
            if self.placer.campaign() == self.me:
                if not was:
                    self._journal("placer", None, None, None, "won the placer role")
                for name, job in self.jobs.items():
                    for m in self.placer.step(name, job.groups.count, self.hosts):
                        self._journal("move", name, m.group, m.new.epoch, m.new.reason, to=m.new.host)
        except EtcdError as e:
            log.warning("%s: placement skipped: %s", self.me, e)

    def _hung(self) -> dict[GroupRef, str]:
        """Each job's hang check over this host's trainers of it (its health thresholds, its progress sources)."""
        for name in [n for n in self.watches if n not in self.jobs]:
            del self.watches[name]
        out: dict[GroupRef, str] = {}
        for name, job in self.jobs.items():
            procs = [
                TrainerProc(g, rank, e, p.pid, gp.started_at)
                for (j, g), (e, gp) in self.running.items()
                if j == name
                for rank, p in enumerate(gp.popens)
            ]
            if not procs:
                continue
            watch = self.watches.setdefault(name, JobHangWatch(job))
            for h in watch.observe(self.wall(), procs):
                out[(name, h.group)] = (
                    f"no progress for {h.silent_s:.1f} s (limit {h.timeout_s:g} s, last step {h.last_step}, from {h.source})"
                )
        return out

    def _check_gpus(self) -> None:
        """A GPU fault of the kinds that drain a Slurm node takes this host out (said in etcd, with the reason)."""
        if self.gpus is None:
            return
        seen = self.gpus.observe(self.clock())
        health = f"{sum(o.healthy for o in seen)}/{len(seen)} ok"
        if self.lease.info.get("gpus") != health:
            self.lease.publish(gpus=health)
        if self.taken_out is not None:
            return
        bad = [o for o in seen if gpu_response(o.status, o.kind, o.values.get("problems", ())) == OUT_RESPONSE]
        if not bad:
            return
        reason = "; ".join(o.reason for o in bad)
        try:
            self.store.put(self.keys.out(self.me), json.dumps({"reason": reason, "by": self.me}))
        except EtcdError as e:
            log.error("%s: GPU fault (%s) but cannot take this host out in etcd: %s", self.me, reason, e)
        self.taken_out = reason  # its trainers are killed now, whether or not etcd heard it
        self._journal("out", None, None, None, reason)

    def _read(self) -> None:
        try:
            _, entries = self.store.prefix(self.keys.root)
        except EtcdError as e:
            log.warning("%s: cannot read the assignments (keeping the last ones): %s", self.me, e)
            return
        placer = next((x for x in entries if x.key == self.keys.placer), None)
        self.placer_seen = placer.value if placer else None
        out = next((x for x in entries if x.key == self.keys.out(self.me)), None)
        self.taken_out = json.loads(out.value).get("reason", "taken out") if out else None
        assigned: dict[GroupRef, Assignment] = {}
        jobs: dict[str, JobConfig] = {}
        for entry in entries:
            parts = entry.key[len(self.keys.root) :].split("/")  # jobs/<job>/spec | jobs/<job>/groups/<g> | ...
            if len(parts) == 3 and parts[2] == "spec":
                # Parsed once per submission (its create revision): a job is changed by submitting it again.
                jobs[parts[1]] = self._spec(parts[1], entry.create_revision, entry.value)
            elif len(parts) == 4 and parts[2] == "groups":
                assigned[(parts[1], int(parts[3]))] = Assignment.from_json(entry.value)
        self.jobs, self.assigned = jobs, assigned  # a cancelled job is gone from both: its trainers are stale

    def _spec(self, name: str, created: int, text: str) -> JobConfig:
        have = self._specs.get(name)
        if have is None or have[0] != created:
            have = (created, JobConfig.model_validate(json.loads(text)))
            self._specs[name] = have
        return have[1]

    def _reap(self) -> list[Trainer]:
        ended, self.unstarted = self.unstarted, []
        for ref, (epoch, gp) in list(self.running.items()):
            if not gp.running():
                codes = [p.wait() for p in gp.popens]
                code = next((c for c in codes if c != 0), 0)
                ended.append(Trainer(ref[0], ref[1], epoch, gp.popens[0].pid, exit_code=code))
                del self.running[ref]
                self._journal("ended", ref[0], ref[1], epoch, f"trainer exited {code}")
        return ended

    def _do(self, a: HostAction) -> None:
        ref = (a.job, a.group)
        log.warning("%s: %s %s group %s epoch %s: %s", self.me, a.kind, a.job, a.group, a.epoch, a.reason)
        self._journal(a.kind, a.job, a.group, a.epoch, a.reason)
        if a.kind == "kill":
            have = self.running.get(ref)
            if have is not None and have[0] == a.epoch:
                have[1].kill()
                del self.running[ref]
                if a.failure:  # seen next cycle as the trainer's failure: the restart policy applies
                    self.unstarted.append(Trainer(a.job, a.group, a.epoch, a.pid or 0, exit_code=-9))
        elif a.kind == "start":
            self._start(a)
        elif a.kind == "report_failed":
            doc = json.dumps({"host": self.me, "epoch": a.epoch, "reason": a.reason})
            try:
                self.store.put(self.keys.failed(a.job, a.group), doc)
            except EtcdError as e:
                log.error("%s: cannot report group %s of %s failed: %s", self.me, a.group, a.job, e)

    def _start(self, a: HostAction) -> None:
        job = self.jobs[a.job]
        run_dir = self._run_dir(a.job)
        config = self.state_dir / a.job / "job.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(job.model_dump_json(indent=2))
        argv, envs = group_launch(
            job,
            group=a.group,
            attempt=a.epoch,
            lighthouse=lighthouse_address(job),
            config_path=config,
            run_dir=run_dir,
            python=self.python,
        )
        try:
            gp = GroupProcesses.start(
                group=a.group,
                attempt=a.epoch,
                argv=[die_with_daemon(x) for x in argv],
                envs=envs,
                log_path=run_dir / "logs" / f"g{a.group}-{self.me}.log",
                started_at=self.wall(),
            )
        except StartError as e:
            log.error("%s: %s", self.me, e)
            self.unstarted.append(Trainer(a.job, a.group, a.epoch, 0, exit_code=127))
            return
        self.running[(a.job, a.group)] = (a.epoch, gp)

    def _journal(
        self, action: str, job: str | None, group: int | None, epoch: int | None, reason: str, **extra: object
    ) -> None:
        """One action line in this host's log and in its job's run directory; a log that cannot be written is
        said once and skipped (the action itself never fails for it)."""
        rec: dict[str, object] = {"ts": round(self.wall(), 3), "node": self.me, "action": action}
        # As a Slurm daemon names the groups a line concerns (`lamplighter why` reads it), with no Slurm job;
        # a host-wide line concerns every group running here.
        if job is not None:
            rec.update(target=f"{job}/g{group}", job=job, group=group, epoch=epoch)
            refs = [(job, group, epoch)]
        else:
            rec["target"] = self.me
            refs = [(j, g, e) for (j, g), (e, _) in self.running.items()]
        rec["reason"] = reason
        rec["jobs"] = [{"job_id": BARE_METAL, "group": f"{j}/g{g}", "attempt": e} for j, g, e in refs]
        line = json.dumps({**rec, **extra})
        run_dirs = {self._run_dir(j) / ACTIONS_FILE for j, _, _ in refs if j in self.jobs}
        paths = [self.state_dir / ACTIONS_FILE, *sorted(run_dirs)]
        for path in paths:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                append_line(path, line)
                self._journal_failed.discard(path)
            except OSError as e:
                if path not in self._journal_failed:
                    log.warning("%s: cannot append the action to %s: %s", self.me, path, e)
                    self._journal_failed.add(path)

    def _run_dir(self, job: str) -> Path:
        run_dir = self.jobs[job].run_dir
        return Path(run_dir) if run_dir else self.state_dir / job

    def status(self) -> dict[str, object]:
        return {
            "host": self.me,
            "placer": self.placer.leading,
            "lease_error": self.lease.error,
            "running": {
                f"{j}/g{g}": {"epoch": e, "pids": [p.pid for p in gp.popens]}
                for (j, g), (e, gp) in self.running.items()
            },
            "jobs": sorted(self.jobs),
        }

    def stop(self) -> None:
        """Kill this host's trainers (they would die with the daemon anyway) and hand the placer role on.

        The host's lease is left to expire: a daemon restarted within its TTL finds its groups still
        assigned here and starts them again, instead of having them moved to a spare."""
        for _, gp in self.running.values():
            gp.kill()
        self.running.clear()
        if self.gpus is not None:
            self.gpus.close()
        try:
            if self.placer.leading:
                self.placer.resign()
        except EtcdError as e:
            log.warning("%s: handing the placer role on: %s (it expires with its lease)", self.me, e)
