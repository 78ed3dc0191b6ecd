"""One host daemon of a bare-metal cluster: its lease, the placer role when it wins it, and its trainers.

Each cycle: renew the lease when due (host_lease: every (ttl - margin) / 2),
read this cluster's assignments when they may have changed (prefix_reader:
a watch on the prefix says so), keep or campaign for the placer role and, as
placer, place every job's groups on what changed (placer); run
host_agent.decide on them, then carry its actions out. A quiet cluster costs
etcd one lease renewal per host per renewal interval, and no reads. Trainers are
started with the same process handling as local mode (process_tree: a
session per rank, the whole tree killed), under `setpriv --pdeathsig KILL`,
so a daemon that dies takes its trainers with it instead of leaving them
running unfenced. When etcd cannot be read, the last assignments read are
kept: only the lease decides to fence, never a failed read.

Jobs are in etcd (`<root>/specs/<user>/<job>`: the validated config, as JSON,
written by the etcd user <user>, who alone may write there). Their trainers run
as that user's local account (accounts.py; never root unless the host config
says so), without capabilities, and open everything of the job as that account:
its log, its run directory, the `<run_dir>/job.json` they read (user_launch.py).
A job this host will not run (no such account here, root, a spec that does not
parse) is refused with its reason, in the log and in etcd for `lamplighter
status`; nothing of it starts. Until etcd has shown it would refuse this host a
job's spec (its auth on, and this host's user confined to its role), the host
starts no trainer at all: a host that could write specs could choose what every
host runs, as whom (etcd_roles.py; skipped for `insecure_lab`).

Every action (a trainer ended, killed or started, a failure reported, the host
taken out, a group moved by the placer, the placer role won) is one JSON line
in `<state_dir>/actions.jsonl` and, appended as the job's account, in its
`<run_dir>/actions.jsonl` (host_actions.py), the line a Slurm node daemon writes:
`lamplighter why` and the demo's report read them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from lamplighter.bare import etcd_roles
from lamplighter.bare.accounts import Account, Refused, trainer_account
from lamplighter.bare.etcd_store import EtcdError, Store, delete
from lamplighter.bare.hang_watch import JobHangWatch, lighthouse_address
from lamplighter.bare.host_actions import HostActions
from lamplighter.bare.host_agent import GroupHistory, GroupRef, HostAction, Trainer, decide
from lamplighter.bare.host_lease import HostLease, renew_every, renewal_due
from lamplighter.bare.keys import Keys
from lamplighter.bare.placement import Assignment
from lamplighter.bare.placer import HostEntry, Placer
from lamplighter.bare.prefix_reader import PrefixReader
from lamplighter.bare.user_launch import base_env, start_ranks, trainer_argv
from lamplighter.configs.job_file import job_file_json
from lamplighter.configs.schema import JobConfig
from lamplighter.launch.group import group_launch
from lamplighter.rundir.actions import format_action
from lamplighter.supervisor.gpu.faults import gpu_response
from lamplighter.supervisor.gpu.observation import GpuObservation
from lamplighter.system.process_tree import GroupProcesses, StartError
from lamplighter.system.trainer_proc import TrainerProc

log = logging.getLogger(__name__)

# GPU faults that take the host out: the hardware is at fault, so the group goes to another host (the same
# faults drain a Slurm node, supervisor/gpu/faults.py). A VM fault restarts the group here, a throttle is reported.
OUT_RESPONSE = "drain"
BARE_METAL = "bare metal"  # what an action line names in place of a Slurm job id


class HostConfinementError(RuntimeError):
    """etcd would let this host write job specs: it must not run (names the host and the fix)."""


class GpuObserver(Protocol):
    def observe(self, now: float) -> list[GpuObservation]: ...
    def close(self) -> None: ...


CONFIG_FILE = "job.json"  # in the run directory, as on Slurm


@dataclass(frozen=True)
class Submitted:
    """A job as this host read it from etcd: who submitted it, and whether this host runs it."""

    user: str  # the etcd user whose spec key it is
    key: str
    revision: int  # the spec's create revision: a new submission is a new job
    job: JobConfig | None  # None: the spec does not parse
    account: Account | None  # whose account its trainers run as here; None: refused
    problem: str | None  # why this host will not run it


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
    trainer_users: Mapping[str, str] = field(default_factory=dict)  # etcd user -> local account (bare_metal)
    root_trainers: bool = False  # a job whose user maps to root may run (its trainers still without capabilities)
    confined: bool = False  # etcd was seen refusing this host a job's spec (or insecure_lab: not asked)
    daemon_uid: int = field(default_factory=os.geteuid)
    daemon_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    wall: Callable[[], float] = time.time  # progress (heartbeats, the Lighthouse) is in wall-clock time
    watches: dict[str, JobHangWatch] = field(default_factory=dict)  # job -> its hang check
    taken_out: str | None = None  # why this host is out (its key under out/), as last read
    placer_seen: str | None = None  # who held the placer role, as last read
    lease: HostLease = field(init=False)
    placer: Placer = field(init=False)
    jobs: dict[str, JobConfig] = field(default_factory=dict)  # the jobs this host runs
    submitted: dict[str, Submitted] = field(default_factory=dict)  # every job in etcd, run here or not
    assigned: dict[GroupRef, Assignment] = field(default_factory=dict)
    running: dict[GroupRef, tuple[int, GroupProcesses]] = field(default_factory=dict)  # -> (epoch, processes)
    history: dict[GroupRef, GroupHistory] = field(default_factory=dict)
    done: list[HostAction] = field(default_factory=list)  # every action taken, for status and tests
    unstarted: list[Trainer] = field(default_factory=list)  # failed starts (127) and hang kills (-9): exits
    _specs: dict[tuple[str, int], Submitted] = field(default_factory=dict)  # (spec key, create revision) ->
    _forget: list[str] = field(default_factory=list)  # jobs with keys under jobs/ but no spec (cancelled)
    _refusals_seen: dict[str, str] = field(default_factory=dict)  # job -> this host's refusal in etcd
    actions: HostActions = field(init=False)  # this host's action lines, and its jobs' run-dir copies
    _started_under: dict[GroupRef, int] = field(default_factory=dict)  # a running trainer's spec revision
    reader: PrefixReader = field(init=False)  # the cluster's prefix, read when it may have changed
    _placer_kept_at: float | None = None  # when the placer's lease was last renewed (the role kept)
    _placed_at: int | None = None  # the read revision the last placement round ran on

    def __post_init__(self) -> None:
        self.lease = HostLease(self.store, self.keys, self.me, self.ttl_s, {"host": self.me})
        self.placer = Placer(self.store, self.keys, self.me, self.ttl_s)
        self.actions = HostActions(self.me, self.state_dir, self.daemon_uid)
        every = renew_every(self.ttl_s, self.margin_s)
        self.reader = PrefixReader(self.store, self.keys.root, every, lambda: self.clock(), self.me)

    def cycle(self) -> list[HostAction]:
        # Every etcd call before the kills has a deadline: on a cut link each member costs its whole timeout,
        # which can add up past the fence margin, and the fence is decided from the clock after the calls,
        # never from a reading taken before one that blocked.
        deadline, renew_first = self.lease.renewal_deadline(self.clock(), self.margin_s)
        if renew_first and self.lease.renewal_due(self.clock(), self.margin_s):
            with self.store.until(deadline, self.clock):
                self.lease.renew(self.clock())
        if not self.lease.fence_due(self.clock(), self.margin_s)[0]:
            with self.store.until(self.lease.fence_at(self.margin_s), self.clock):
                if self.reader.due():
                    self._read()
                self._check_gpus()
                self._place()
                self._check_confined()
                self._report_refusals()
        ended = self._reap()
        trainers = [
            Trainer(j, g, e, gp.popens[0].pid, spec=self._started_under.get((j, g), 0))
            for (j, g), (e, gp) in self.running.items()
        ] + ended
        restart = {name: job.restart for name, job in self.jobs.items()}
        fence = self.lease.fence_due(self.clock(), self.margin_s)
        hung = {} if fence[0] else self._hung()
        # No trainer starts before etcd has shown this host cannot write specs; running ones are judged as ever.
        assigned = self.assigned if self.confined else {}
        specs = {name: sub.revision for name, sub in self.submitted.items() if name in self.jobs}
        d = decide(self.clock(), self.me, assigned, trainers, self.history, restart, fence, self.taken_out, hung, specs)
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
            now = self.clock()
            leader: str | None = None
            if was and self.placer_seen == self.me:
                # Its lease holds the key: renewed at the lease's interval, and nothing asked between.
                due = renewal_due(now, self._placer_kept_at, self.ttl_s, self.margin_s)
                if not due or self.placer.keep():
                    leader = self.me
                    if due:
                        self._placer_kept_at = now
            if leader is None:
                leader = self.placer.campaign()
                self._placer_kept_at = now if leader == self.me else None
            if leader == self.me:
                if not was:
                    self._journal("placer", None, None, None, "won the placer role")
                seen = self.reader.seen
                if was and seen is not None and self._placed_at == seen[0]:
                    return  # nothing changed since the last round: it would place the same
                self._placed_at = seen[0] if seen is not None else None
                refused = len(self.placer.refused)
                # Every job is placed, also one this host refuses: another host may have its user's account.
                for name, sub in self.submitted.items():
                    if sub.job is None:
                        continue
                    for m in self.placer.step(name, sub.key, sub.job.groups.count, self.hosts, seen):
                        self._journal("move", name, m.group, m.new.epoch, m.new.reason, to=m.new.host)
                if len(self.placer.refused) > refused:
                    self.reader.forget()  # placed on an old read: read again and place anew
                    self._placed_at = None
                for name in self._forget:
                    if self.placer.forget(name):
                        log.warning(
                            "placer %s: job %s has no spec any more (cancelled): its keys deleted", self.me, name
                        )
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
            watch = self.watches.get(name)
            if watch is None:
                account = self.submitted[name].account
                assert account is not None  # self.jobs holds only the jobs this host runs, as an account
                watch = self.watches[name] = JobHangWatch(job, owner=account.uid)
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
        got = self.reader.read()
        if got is None:
            return
        _, entries = got
        placer = next((x for x in entries if x.key == self.keys.placer), None)
        self.placer_seen = placer.value if placer else None
        out = next((x for x in entries if x.key == self.keys.out(self.me)), None)
        self.taken_out = json.loads(out.value).get("reason", "taken out") if out else None
        assigned: dict[GroupRef, Assignment] = {}
        first: dict[str, tuple[str, str, int, str]] = {}  # job -> (user, key, create revision, value)
        named: set[str] = set()  # jobs with keys under jobs/
        refusals: dict[str, str] = {}
        for entry in entries:
            owner = self.keys.parse_spec(entry.key)
            if owner is not None:
                user, name = owner
                # A job's name is the cluster's: the spec created first under it is the job.
                if name not in first or entry.create_revision < first[name][2]:
                    first[name] = (user, entry.key, entry.create_revision, entry.value)
                continue
            parts = entry.key[len(self.keys.jobs) :].split("/") if entry.key.startswith(self.keys.jobs) else []
            if len(parts) == 3:  # <job>/groups/<g> | <job>/failed/<g> | <job>/refused/<host>
                named.add(parts[0])
                if parts[1] == "groups" and parts[2].isdigit():
                    assigned[(parts[0], int(parts[2]))] = Assignment.from_json(entry.value)
                elif parts[1] == "refused" and parts[2] == self.me:
                    refusals[parts[0]] = entry.value
        submitted = {name: self._submitted(name, *how) for name, how in first.items()}
        self.submitted, self._refusals_seen = submitted, refusals
        self.jobs = {
            name: sub.job for name, sub in submitted.items() if sub.job is not None and sub.account is not None
        }
        # A cancelled job, or one refused here, is in neither: its trainers are stale, none of it starts.
        self.assigned = {ref: a for ref, a in assigned.items() if ref[0] in self.jobs}
        self._forget = sorted(named - set(first))

    def _submitted(self, name: str, user: str, key: str, created: int, text: str) -> Submitted:
        """A spec as this host takes it: parsed and judged once per submission (its create revision)."""
        have = self._specs.get((key, created))
        if have is not None:
            return have
        job: JobConfig | None = None
        account: Account | None = None
        try:
            job = JobConfig.model_validate(json.loads(text))
        except ValidationError as e:
            where = "; ".join(
                f"{'.'.join(str(x) for x in err['loc']) or 'job'}: {err['msg']}" for err in e.errors()[:3]
            )
            problem: str | None = f"its spec is not a valid job config ({where})"
        except ValueError as e:  # not JSON
            problem = f"its spec is not a valid job config ({e})"
        else:
            if job.name != name:
                problem, job = f"its spec names another job ({job.name!r})", None
            else:
                verdict = trainer_account(user, self.trainer_users, self.root_trainers, self.daemon_uid)
                account, problem = (None, verdict.reason) if isinstance(verdict, Refused) else (verdict, None)
        if problem is not None:
            log.warning("%s: refusing job %s of etcd user %s: %s", self.me, name, user, problem)
        have = Submitted(user, key, created, job, account, problem)
        self._specs = {k: v for k, v in self._specs.items() if k[0] != key}  # earlier submissions are gone
        self._specs[(key, created)] = have
        return have

    def _check_confined(self) -> None:
        """Once: etcd must refuse this host a job's spec, or it could choose what runs on every host, as whom."""
        if self.confined:
            return
        try:
            writes = etcd_roles.lets_write_specs(self.store, self.keys)
        except EtcdError as e:
            log.warning("%s: cannot ask etcd what this host may write yet (no trainer starts): %s", self.me, e)
            return
        if writes:
            raise HostConfinementError(
                f"{self.me}: etcd lets this host write job specs (etcd auth off, or its etcd user "
                f"{self.store.auth.user if self.store.auth else '(none)'} holds more than its host role): any "
                "holder of its credentials could run anything on every host, as anyone. Enable etcd auth with "
                "the roles `lamplighter hosts roles` prints, or set etcd.insecure_lab on a test machine"
            )
        self.confined = True

    def _report_refusals(self) -> None:
        """Say in etcd why this host will not run a job (`lamplighter status` shows it), once; take it back
        once it runs here."""
        for name, sub in self.submitted.items():
            said = self._refusals_seen.get(name)
            try:
                if sub.problem is not None and said is None:
                    doc = json.dumps({"host": self.me, "user": sub.user, "reason": sub.problem})
                    self.store.put(self.keys.refused(name, self.me), doc)
                elif sub.problem is None and said is not None:
                    self.store.txn(f"{self.me} runs {name} now", [], [delete(self.keys.refused(name, self.me))])
            except EtcdError as e:
                log.warning("%s: cannot say in etcd why job %s does not run here: %s", self.me, name, e)

    def _reap(self) -> list[Trainer]:
        ended, self.unstarted = self.unstarted, []
        for ref, (epoch, gp) in list(self.running.items()):
            if not gp.running():
                codes = [p.wait() for p in gp.popens]
                code = next((c for c in codes if c != 0), 0)
                ended.append(Trainer(ref[0], ref[1], epoch, gp.popens[0].pid, exit_code=code))
                del self.running[ref]
                self._started_under.pop(ref, None)
                self._journal("ended", ref[0], ref[1], epoch, f"trainer exited {code}")
        return ended

    def _do(self, a: HostAction) -> None:
        ref = (a.job, a.group)
        log.warning("%s: %s %s group %s epoch %s: %s", self.me, a.kind, a.job, a.group, a.epoch, a.reason)
        if a.kind == "kill":
            # Killed first, said after (at the time it was decided): the line goes to the run directory
            # through a process of the job's user, and a fence must not wait for it.
            ts = self.wall()
            have = self.running.get(ref)
            if have is not None and have[0] == a.epoch:
                have[1].kill()
                del self.running[ref]
                self._started_under.pop(ref, None)
                if a.failure:  # seen next cycle as the trainer's failure: the restart policy applies
                    self.unstarted.append(Trainer(a.job, a.group, a.epoch, a.pid or 0, exit_code=-9))
            self._journal(a.kind, a.job, a.group, a.epoch, a.reason, ts=ts)
            return
        self._journal(a.kind, a.job, a.group, a.epoch, a.reason)
        if a.kind == "start":
            self._start(a)
        elif a.kind == "report_failed":
            doc = json.dumps({"host": self.me, "epoch": a.epoch, "reason": a.reason})
            try:
                self.store.put(self.keys.failed(a.job, a.group), doc)
            except EtcdError as e:
                log.error("%s: cannot report group %s of %s failed: %s", self.me, a.group, a.job, e)

    def _start(self, a: HostAction) -> None:
        """The group's ranks, as the job's account (user_launch.py): nothing of the job is opened as root."""
        job, sub = self.jobs[a.job], self.submitted[a.job]
        assert sub.account is not None  # only accepted jobs are in self.jobs
        run_dir = self._run_dir(a.job)
        config = run_dir / CONFIG_FILE
        log_path = run_dir / "logs" / f"g{a.group}-{self.me}.log"
        argv, envs = group_launch(
            job,
            group=a.group,
            attempt=a.epoch,
            lighthouse=lighthouse_address(job),
            config_path=config,
            run_dir=run_dir,
            python=self.python,
            base_env=base_env(sub.account, self.daemon_env),
        )
        try:
            wrapped = [
                trainer_argv(sub.account, self.daemon_uid, run_dir, log_path, config, f"{self.me}.{rank}", x)
                for rank, x in enumerate(argv)
            ]
            popens = start_ranks(wrapped, envs, job_file_json(job))
        except StartError as e:
            log.error("%s: group %s of %s epoch %s: %s", self.me, a.group, a.job, a.epoch, e)
            self.unstarted.append(Trainer(a.job, a.group, a.epoch, 0, exit_code=127))
            return
        gp = GroupProcesses.adopt(
            group=a.group, attempt=a.epoch, popens=popens, log_path=log_path, started_at=self.wall()
        )
        self.running[(a.job, a.group)] = (a.epoch, gp)
        self._started_under[(a.job, a.group)] = sub.revision

    def _journal(
        self,
        action: str,
        job: str | None,
        group: int | None,
        epoch: int | None,
        reason: str,
        ts: float | None = None,
        **extra: object,
    ) -> None:
        """One action line in this host's log and in its job's run directory; a log that cannot be written is
        said once and skipped (the action itself never fails for it)."""
        when = self.wall() if ts is None else ts
        # As a Slurm daemon names the groups a line concerns (`lamplighter why` reads it), with no Slurm job;
        # a host-wide line concerns every group running here.
        if job is not None:
            target = f"{job}/g{group}"
            extra.update(job=job, group=group, epoch=epoch)
            refs = [(job, group, epoch)]
        else:
            target = self.me
            refs = [(j, g, e) for (j, g), (e, _) in self.running.items()]
        jobs = [{"job_id": BARE_METAL, "group": f"{j}/g{g}", "attempt": e} for j, g, e in refs]
        line = format_action(round(when, 3), self.me, action, target, reason, {}, jobs=jobs, **extra)
        self.actions.append(line, {(self._run_dir(j), self.submitted[j].account) for j, _, _ in refs if j in self.jobs})

    def _run_dir(self, job: str) -> Path:
        run_dir = self.jobs[job].run_dir
        assert run_dir, "the schema requires an absolute run_dir on bare metal"
        return Path(run_dir)

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
            "refused": {name: sub.problem for name, sub in self.submitted.items() if sub.problem},
            "confined": self.confined,
        }

    def stop(self) -> None:
        """Kill this host's trainers (they would die with the daemon anyway) and hand the placer role on.

        The host's lease is left to expire: a daemon restarted within its TTL finds its groups still
        assigned here and starts them again, instead of having them moved to a spare."""
        for _, gp in self.running.values():
            gp.kill()
        self.running.clear()
        self.reader.close()
        if self.gpus is not None:
            self.gpus.close()
        try:
            if self.placer.leading:
                self.placer.resign()
        except EtcdError as e:
            log.warning("%s: handing the placer role on: %s (it expires with its lease)", self.me, e)
