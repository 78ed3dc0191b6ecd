"""Renew a replica group before its Slurm time limit: `python -m lamplighter.slurm.injob.renew` (torch-free).

A group's batch script traps the USR1 that `#SBATCH --signal=B:USR1@<s>` makes
Slurm send before the time limit, and runs this helper. The helper requeues the
group's own job (`scontrol requeue`), so it starts again with a fresh time
limit and heals from the live groups, but only once leaving is safe:

1. every other group is live and caught up in the Lighthouse's quorum (listed
   in the last quorum at its step, not recovering, heartbeat fresh), so the
   renewed group has peers to heal from and no other group is away or still
   healing, and
2. no other group is away renewing. Each renewal takes the next lease,
   `<run_dir>/renewal/lease-<n>.json` (created exclusively: of two groups
   warned in the same Slurm tick that both see everyone live, one gets it),
   naming the group and the torchft replica id it leaves with. A lease is
   released when its group is live and caught up again under a new replica id
   (torchft appends a new uuid on every start).

From `EndTime - guard` on, it renews as soon as at least one other group is
live, caught up and not itself renewing (that group keeps the state); with
none, it holds on, since leaving would lose the state: a peer that returns and
heals in time lets it go, else Slurm ends the run at its limit (TIMEOUT; the
node daemon treats that as a failure and requeues it). The warnings of the
groups are staggered (slurm.renewal), so normally each finds the others live
at once and none of this waiting happens.

Every step is appended to `<run_dir>/renewal/<who>.jsonl` (warned, waiting,
requeued), the timeline `lamplighter status` and the tests read.

The Lighthouse job (`--lighthouse-job`) renews at once: it is warned before any
group, and the groups ride through its restart on torchft's quorum retries.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lamplighter.lighthouse.progress import group_of
from lamplighter.lighthouse.status import LighthouseStatus, LighthouseStatusError, fetch_status
from lamplighter.rundir.contract import read_lighthouse_address
from lamplighter.slurm.actions import SlurmActions, SlurmApi
from lamplighter.slurm.run import SlurmCli, SlurmError

RENEWAL_DIR = "renewal"
GUARD_S = 5.0  # renew at the latest this long before EndTime (Slurm kills at its first check after it)
POLL_S = 1.0
GIVE_UP_AFTER_END_S = 120.0  # Slurm ends a run within 30 s of its limit: a helper still here is orphaned


@dataclass(frozen=True)
class Lease:
    n: int
    group: int
    replica: str | None  # the holder's torchft replica id when it took the lease
    t: float


@dataclass(frozen=True)
class RenewDecision:
    renew: bool
    reason: str


def live_groups(status: LighthouseStatus) -> dict[int, str]:
    """Groups that are live and caught up -> their torchft replica id.

    Live and caught up: in the last quorum, heartbeat fresh, not recovering, and at the quorum's
    step (one behind at most). A group that has just joined is in the quorum at its old step,
    marked recovering, while it receives the weights; only in the next quorum has it healed.
    """
    fresh = {h.replica_id for h in status.heartbeats if not h.old}
    top = status.max_step()
    out: dict[int, str] = {}
    for m in status.members:
        g = group_of(m.replica_id)
        if g is None or m.replica_id not in fresh or m.recovering or (top is not None and m.step < top - 1):
            continue
        out[g] = m.replica_id
    return out


NO_REPLICA_RELEASE_S = 30.0  # a lease taken without a known replica id is released this long after, once live


def lease_released(lease: Lease, live: dict[int, str], me: int, now: float) -> bool:
    """The lease holder renewed and is back: live and caught up under a replica id other than its old one."""
    if lease.group == me:
        return True  # our own earlier renewal: we are running again
    if lease.group not in live:
        return False
    if lease.replica is None:
        return now - lease.t > NO_REPLICA_RELEASE_S
    return live[lease.group] != lease.replica


def decide(
    me: int, groups: int, status: LighthouseStatus | None, leases: list[Lease], now: float, deadline: float
) -> RenewDecision:
    """Renew now, or wait (and why). Pure: the caller reads the Lighthouse, the leases and the clock.

    Normally a group renews when every other group is live and caught up and none is away renewing,
    and it has caught up itself (with a short limit, Slurm may warn a group that has only just started).
    From `deadline` on it renews if at least one other group is live, caught up and not renewing: the
    state survives in that group. With none, it holds on (renewing would leave nobody with the state):
    a peer that comes back and heals in time lets it go; else Slurm ends it at its limit.
    """
    others = [g for g in range(groups) if g != me]
    live = live_groups(status) if status is not None else {}
    away = sorted({lease.group for lease in leases if not lease_released(lease, live, me, now)} - {me})
    live_others = [g for g in others if g in live and g not in away]
    if status is not None and len(live_others) == len(others) and (me in live or now >= deadline):
        if not others:
            return RenewDecision(True, "the only group: no peer to wait for")
        return RenewDecision(True, f"all {len(others)} other group(s) live in quorum {status.quorum_id}")
    if now >= deadline and live_others:
        return RenewDecision(
            True, f"time limit near: {len(live_others)} of {len(others)} other group(s) live ({_groups(live_others)})"
        )
    if status is None:
        why = "Lighthouse unreadable"
    elif me not in live and len(live_others) == len(others):
        why = "this group has not caught up since its start: renewing now would waste its run"
    elif away:
        why = f"group(s) {_groups(away)} renewing and not back yet"
    else:
        why = f"waiting for group(s) {_groups([g for g in others if g not in live_others])} to be live"
    if now >= deadline:
        why = f"holding on past the renewal deadline, no other group live to keep the state ({why})"
    return RenewDecision(False, why)


def _groups(gs: list[int]) -> str:
    return ",".join(str(g) for g in gs)


class LeaseDir:
    """lease-<n>.json files; the highest n is the current lease."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def all(self) -> list[Lease]:
        """Every lease, oldest first."""
        out = []
        for p in self.root.glob("lease-*.json"):
            try:
                n = int(p.stem.split("-", 1)[1])
                obj = json.loads(p.read_text())
                out.append(Lease(n, int(obj["group"]), obj.get("replica"), float(obj["t"])))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not ours
        return sorted(out, key=lambda lease: lease.n)

    def latest(self) -> Lease | None:
        leases = self.all()
        return leases[-1] if leases else None

    def take(self, after: Lease | None, group: int, replica: str | None, now: float) -> Lease | None:
        """Take lease n+1 (n: `after`'s); None if another group took it first."""
        n = (after.n if after else 0) + 1
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"lease-{n}.json"
        tmp = self.root / f".lease-{n}.{group}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"group": group, "replica": replica, "t": now}))
        try:
            os.link(tmp, path)  # atomic and exclusive (also on NFS), and never seen half-written
        except FileExistsError:
            return None
        finally:
            tmp.unlink(missing_ok=True)
        return Lease(n, group, replica, now)


def renewals_file(root: Path, group: int, job_id: int) -> Path:
    """How many times this group's Slurm job renewed itself: the batch script exports it as LAMPLIGHTER_RENEWALS."""
    return root / f"g{group}-{job_id}.renewals"


def count_renewal(root: Path, group: int, job_id: int) -> int:
    path = renewals_file(root, group, job_id)
    try:
        n = int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        n = 0
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{n + 1}\n")
    os.replace(tmp, path)
    return n + 1


class Timeline:
    """`<run_dir>/renewal/<who>.jsonl`: one JSON line per event, also printed to the job's log."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock

    def event(self, event: str, **fields: Any) -> None:
        rec = {"t": round(self.clock(), 3), "event": event, **fields}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"lamplighter renew: {json.dumps(rec)}", flush=True)


def my_replica(status: LighthouseStatus | None, me: int) -> str | None:
    """This group's current torchft replica id (from its heartbeat), recorded in the lease it takes."""
    if status is None:
        return None
    for h in status.heartbeats:
        if not h.old and group_of(h.replica_id) == me:
            return h.replica_id
    return None


def end_time_epoch(fields: dict[str, str]) -> float | None:
    """EndTime of `scontrol show job` (local time) as epoch seconds; None if unknown."""
    value = fields.get("EndTime")
    if not value or value in ("Unknown", "None", "N/A"):
        return None
    try:
        return time.mktime(time.strptime(value, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def renew_group(
    api: SlurmApi,
    job_id: int,
    me: int,
    groups: int,
    read_status: Callable[[], LighthouseStatus],
    leases: LeaseDir,
    timeline: Timeline,
    *,
    script_alive: Callable[[], bool] = lambda: True,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    guard_s: float = GUARD_S,
    poll_s: float = POLL_S,
) -> RenewDecision | None:
    """Wait until renewing is safe (or the limit is near), take a lease and requeue the job.

    None: the job's run ended meanwhile (its batch script is gone, or it is long past its limit).
    """
    info = api.job(job_id)
    end = end_time_epoch(info.fields)
    now = clock()
    deadline = (end - guard_s) if end is not None else now
    give_up_at = (end if end is not None else now) + GIVE_UP_AFTER_END_S
    timeline.event("warned", group=me, job_id=job_id, restarts=info.restarts, end_time=end, left_s=_left(end, now))
    last_reason = None
    while True:
        now = clock()
        if not script_alive() or now > give_up_at:
            timeline.event("stopped", group=me, reason="the run ended before it could renew", left_s=_left(end, now))
            return None
        try:
            status: LighthouseStatus | None = read_status()
        except LighthouseStatusError:
            status = None
        held = leases.all()
        d = decide(me, groups, status, held, now, deadline)
        if d.renew:
            if leases.take(held[-1] if held else None, me, my_replica(status, me), now) is None:
                continue  # another group took that lease first: it is leaving; look again
            # Counted and logged first: requeueing stops this helper with the rest of the job.
            count_renewal(leases.root, me, job_id)
            timeline.event(
                "requeued", group=me, job_id=job_id, restarts=info.restarts, reason=d.reason, left_s=_left(end, now)
            )
            api.requeue(job_id)
            return d
        if d.reason != last_reason:
            timeline.event("waiting", group=me, reason=d.reason, left_s=_left(end, now))
            last_reason = d.reason
        sleep(poll_s)


def _left(end: float | None, now: float) -> float | None:
    return None if end is None else round(end - now, 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m lamplighter.slurm.injob.renew",
        description="Requeue this Slurm job before its time limit once the other replica groups are live.",
    )
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--group", type=int, help="this job's replica group")
    who.add_argument("--lighthouse-job", action="store_true", help="this job runs the Lighthouse: renew at once")
    p.add_argument("--groups", type=int, default=1, help="number of replica groups")
    p.add_argument(
        "--lighthouse",
        help="Lighthouse address, http://host:port (groups; default: where the job's Lighthouse published it)",
    )
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--job-id", type=int, default=None, help="default: $SLURM_JOB_ID")
    p.add_argument("--slurm-conf", default=None, help="default: $SLURM_CONF")
    args = p.parse_args(argv)
    job_id = args.job_id if args.job_id is not None else int(os.environ["SLURM_JOB_ID"])
    api = SlurmActions(SlurmCli(slurm_conf=args.slurm_conf or os.environ.get("SLURM_CONF")))
    root = args.run_dir / RENEWAL_DIR
    try:
        if args.lighthouse_job:
            timeline = Timeline(root / "lighthouse.jsonl")
            timeline.event("warned", job_id=job_id)
            timeline.event("requeued", job_id=job_id, reason="the Lighthouse renews before any group")
            api.requeue(job_id)
            return 0
        address = args.lighthouse or read_lighthouse_address(args.run_dir)
        if not address or not 0 <= args.group < args.groups:
            p.error(f"--group needs 0 <= group < --groups and a Lighthouse address (none published in {args.run_dir})")
        parent = os.getppid()  # the batch script, which runs this in the background
        renew_group(
            api,
            job_id,
            args.group,
            args.groups,
            lambda: fetch_status(address),
            LeaseDir(root),
            Timeline(root / f"g{args.group}.jsonl"),
            script_alive=lambda: os.getppid() == parent,
        )
    except SlurmError as e:
        print(f"lamplighter renew: job {job_id}: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
