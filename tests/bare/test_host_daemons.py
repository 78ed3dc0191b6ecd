"""Host daemons on a real etcd, with real trainer processes: a cut link fences, a spare takes over, a failing
group moves. The hosts share this machine; each host's way to etcd can be cut for real (lab/tcp_link.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from lamplighter.bare.etcd_store import Entry, Store
from lamplighter.bare.host_lease import renew_every
from lamplighter.bare.keys import Keys
from lamplighter.bare.placement import Assignment
from lamplighter.bare.placer import HostEntry
from lamplighter.configs.schema import JobConfig
from lamplighter.lab.bare_report import fencing
from lamplighter.lab.etcd_cluster import EtcdCluster
from lamplighter.lab.host_daemons import lab_host_daemon
from lamplighter.lab.tcp_link import TcpLink
from lamplighter.lab.testcluster import wait_until
from lamplighter.slurm.chaos.inject import read_records

pytestmark = pytest.mark.integration

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
USER = "tester"  # the etcd user the tests submit as


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(tmp_path_factory.mktemp("etcd"), size=1) as cluster:
        yield cluster


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@dataclass
class SilentFromItsNextRead(Store):
    """A host's way to etcd that goes silent between its renewal and its read once armed: a partition that
    strikes mid-cycle, losing packets, so that every call after it waits out its whole timeout."""

    armed: TcpLink | None = None

    def prefix(self, prefix: str) -> tuple[int, list[Entry]]:
        if self.armed is not None:
            self.armed.silence()
            self.armed = None
        return super().prefix(prefix)


class Hosts:
    def __init__(
        self,
        etcd: EtcdCluster,
        tmp: Path,
        cluster: str,
        names: list[HostEntry],
        *,
        members: int = 1,
        ttl_s: int = 2,
        margin_s: float = 0.7,
    ) -> None:
        """`members`: how many etcd members each host is given, all behind its one link (one real member)."""
        self.keys = Keys(cluster)
        self.links = {h.name: TcpLink(("127.0.0.1", etcd.members[0].client_port)) for h in names}
        self.daemons = {
            h.name: lab_host_daemon(
                SilentFromItsNextRead([self.links[h.name].url] * members, timeout_s=0.5),
                self.keys,
                h.name,
                names,
                tmp / h.name,
                etcd_user=USER,
                ttl_s=ttl_s,
                margin_s=margin_s,
            )
            for h in names
        }
        self.admin = Store(etcd.endpoints)
        # Daemons not cycled: the hosts share this thread, and a cut-off host that waits on etcd would starve
        # the others past their leases, which on real hosts run on their own.
        self.paused: set[str] = set()

    def submit(self, job: JobConfig) -> None:
        for d in self.daemons.values():  # every host registered first: placement sees them all
            d.cycle()
        self.admin.put(self.keys.spec(USER, job.name), job.model_dump_json())

    def cycle_until(
        self, cond: Callable[[], bool], timeout_s: float, what: str, each: Callable[[], None] = lambda: None
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            for name, d in self.daemons.items():
                if name not in self.paused:
                    d.cycle()
            each()
            if cond():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout_s} s: {what}")
            time.sleep(0.1)

    def runs(self, host: str, job: str, group: int, epoch: int | None = None) -> bool:
        have = self.daemons[host].running.get((job, group))
        return have is not None and (epoch is None or have[0] == epoch) and alive(have[1].popens[0].pid)

    def assignment(self, job: str, group: int) -> Assignment:
        e = self.admin.get(self.keys.group(job, group))
        assert e is not None
        return Assignment.from_json(e.value)

    def close(self) -> None:
        for d in self.daemons.values():
            d.stop()
        for link in self.links.values():
            link.close()


def job(tmp: Path, name: str, groups: int, command: list[str], **extra: object) -> JobConfig:
    doc: dict[str, object] = {
        "name": name,
        "run_dir": str(tmp / "runs" / name),
        "groups": {"count": groups},
        "lighthouse": {"port": 29510},
        "trainer": {"command": command},
    }
    return JobConfig.model_validate({**doc, **extra})


def test_a_cut_host_fences_its_trainer_before_the_spare_starts_the_group(etcd: EtcdCluster, tmp_path: Path) -> None:
    hosts = Hosts(etcd, tmp_path, "cut", [HostEntry("h1"), HostEntry("h2"), HostEntry("s1", spare=True)])
    try:
        hosts.submit(job(tmp_path, "bt", 2, SLEEPER))
        hosts.cycle_until(lambda: hosts.runs("h1", "bt", 0) and hosts.runs("h2", "bt", 1), 20, "both groups run")
        old_pid = hosts.daemons["h2"].running[("bt", 1)][1].popens[0].pid
        t_cut = time.time()
        hosts.links["h2"].cut()
        overlap: list[float] = []

        def no_split_brain() -> None:
            if alive(old_pid) and hosts.runs("s1", "bt", 1):
                overlap.append(time.monotonic())

        hosts.cycle_until(lambda: hosts.runs("s1", "bt", 1, epoch=2), 20, "the spare runs group 1", no_split_brain)
        assert overlap == [], "the cut host's trainer and the spare's ran at once"
        assert not alive(old_pid)
        fenced = [a for a in hosts.daemons["h2"].done if a.kind == "kill"]
        assert fenced and "fencing: lease not renewed" in fenced[0].reason
        a = hosts.assignment("bt", 1)
        assert (a.host, a.epoch) == ("s1", 2) and "h2's lease expired" in a.reason
        # The same, as every host wrote it in the job's action log (what `make demo-bare` reports from).
        lines = sorted(read_records(tmp_path / "runs" / "bt" / "actions.jsonl"), key=lambda r: r["ts"])
        moved = [r for r in lines if r["action"] == "move" and r["group"] == 1 and r["ts"] > t_cut]
        assert [(r["to"], r["epoch"]) for r in moved] == [("s1", 2)]
        f = fencing({"t": t_cut, "host": "h2", "group": 1, "epoch": 1, "epoch_after": 2}, lines, [])
        assert f["fenced"] and f["fence_before_start_s"] > 0, f
        hosts.links["h2"].mend()
        hosts.cycle_until(lambda: hosts.daemons["h2"].lease.error is None, 10, "h2 back in etcd")
        hosts.cycle_until(lambda: True, 5, "one more round")
        assert not hosts.runs("h2", "bt", 1) and hosts.runs("s1", "bt", 1, epoch=2) and hosts.runs("h1", "bt", 0)
        # Run last: the daemons do not cycle while it runs, and a host that outlives its lease kills its trainers.
        why = subprocess.run(
            [sys.executable, "-m", "lamplighter", "why", "bt", "--run-dir", str(tmp_path / "runs" / "bt")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert why.returncode == 0, why.stderr
        assert "group bt/g1 (bare metal)" in why.stdout and "fencing: lease not renewed" in why.stdout, why.stdout
    finally:
        hosts.close()


def test_a_link_gone_silent_mid_cycle_still_fences_before_the_lease_can_expire(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    """Found by CI in `make demo-bare`: a partition right after a renewal left the host blocked in a read, then
    deciding from a fence check made before it; the kill came after etcd could expire the lease and the group
    had started elsewhere. Ttl 2 s, margin 0.7 s, three members behind the host's link at 0.5 s each: that
    read alone outlasts the lease."""
    names = [HostEntry("h1"), HostEntry("h2"), HostEntry("s1", spare=True)]
    hosts = Hosts(etcd, tmp_path, "silent", names, members=3)
    try:
        hosts.submit(job(tmp_path, "bs", 2, SLEEPER))
        hosts.cycle_until(lambda: hosts.runs("h1", "bs", 0) and hosts.runs("h2", "bs", 1), 20, "both groups run")
        h2 = hosts.daemons["h2"]
        assert isinstance(h2.store, SilentFromItsNextRead)
        h2.store.armed = hosts.links["h2"]
        killed_by: list[float] = []

        def note_the_kill() -> None:
            if not killed_by and any(a.kind == "kill" for a in h2.done):
                killed_by.append(time.monotonic())
                hosts.paused.add("h2")  # fenced: its renewals (three members, blocked) would stall the others

        hosts.cycle_until(lambda: hosts.runs("s1", "bs", 1, epoch=2), 30, "the spare runs group 1", note_the_kill)
        assert hosts.links["h2"].is_silent and h2.lease.renewed_at is not None
        kill = next(a for a in h2.done if a.kind == "kill")
        assert "fencing: lease not renewed" in kill.reason
        # etcd counts the TTL from the renewal it received, which was sent no sooner than renewed_at.
        assert killed_by[0] < h2.lease.renewed_at + h2.ttl_s, (killed_by[0] - h2.lease.renewed_at, kill)
    finally:
        hosts.close()


def test_a_group_that_cannot_restart_on_its_host_moves(etcd: EtcdCluster, tmp_path: Path) -> None:
    hosts = Hosts(etcd, tmp_path, "fail", [HostEntry("h1"), HostEntry("s1", spare=True)])
    # Fails under epoch 1 (on h1, twice: the budget allows one restart there), runs under epoch 2.
    flaky = [
        sys.executable,
        "-c",
        "import os, sys, time; os.environ['LAMPLIGHTER_ATTEMPT'] == '1' and sys.exit(3); time.sleep(600)",
    ]
    try:
        hosts.submit(job(tmp_path, "fl", 1, flaky, restart={"budget_per_group": 1, "backoff_initial_s": 0}))
        hosts.cycle_until(lambda: hosts.runs("s1", "fl", 0, epoch=2), 30, "group 0 moved to the spare")
        h1 = [(a.kind, a.epoch) for a in hosts.daemons["h1"].done]
        assert h1 == [("start", 1), ("start", 1), ("report_failed", 1)]
        a = hosts.assignment("fl", 0)
        assert (a.host, a.epoch) == ("s1", 2) and "cannot be restarted on h1" in a.reason
    finally:
        hosts.close()


BEATS_THEN_HANGS = """
import json, os, sys, time
from pathlib import Path
run = Path(os.environ["LAMPLIGHTER_RUN_DIR"])
group, attempt = os.environ["LAMPLIGHTER_REPLICA_ID"], int(os.environ["LAMPLIGHTER_ATTEMPT"])
beat = run / "heartbeat" / (group + ".0.json")
beat.parent.mkdir(parents=True, exist_ok=True)
for step in range(1, 4):
    tmp = beat.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(step=step, time=time.time(), pid=os.getpid(), attempt=attempt)))
    tmp.replace(beat)
    time.sleep(0.2)
time.sleep(600)  # stuck: alive, no progress
"""


def test_a_hung_trainer_is_killed_and_restarted_under_its_budget(etcd: EtcdCluster, tmp_path: Path) -> None:
    hosts = Hosts(etcd, tmp_path, "hang", [HostEntry("h1"), HostEntry("s1", spare=True)])
    script = tmp_path / "beats_then_hangs.py"
    script.write_text(BEATS_THEN_HANGS)
    quick = {
        "health": {"hang_timeout_s": 3, "startup_timeout_s": 10, "progress": "heartbeat"},
        "torchft": {"pg_timeout_s": 1, "timeout_s": 1, "quorum_timeout_s": 2},
        "lighthouse": {"port": 29510, "join_timeout_ms": 100},
        "restart": {"budget_per_group": 5, "backoff_initial_s": 0},
    }
    try:
        hosts.submit(job(tmp_path, "hg", 1, [sys.executable, str(script)], **quick))

        def starts() -> list[str]:
            return [a.reason for a in hosts.daemons["h1"].done if a.kind == "start"]

        hosts.cycle_until(lambda: len(starts()) >= 2, 30, "the hung trainer killed and started again")
        kills = [a for a in hosts.daemons["h1"].done if a.kind == "kill"]
        assert (
            kills
            and kills[0].failure
            and "hung: no progress for" in kills[0].reason
            and "last step 3" in kills[0].reason
        )
        assert "(restart 1)" in starts()[1]
        assert hosts.assignment("hg", 0).host == "h1"  # a hang restarts the group where it is
    finally:
        hosts.close()


def test_the_placer_dies_and_another_host_takes_the_role_within_its_lease(etcd: EtcdCluster, tmp_path: Path) -> None:
    hosts = Hosts(etcd, tmp_path, "elect", [HostEntry("h1"), HostEntry("h2"), HostEntry("s1", spare=True)])
    try:
        hosts.submit(job(tmp_path, "el", 1, SLEEPER))
        hosts.cycle_until(lambda: hosts.runs("h1", "el", 0), 20, "group 0 runs on h1")
        assert [d.me for d in hosts.daemons.values() if d.placer.leading] == ["h1"]
        h2 = hosts.daemons["h2"]
        # h1 dies (power loss: its daemon stops cycling, its trainer goes with it): its keys outlive it
        # only for their lease, which etcd ends.
        dead = hosts.daemons.pop("h1")
        for _, gp in dead.running.values():
            gp.kill()
        vacant_rounds: list[int] = []

        def vacant() -> None:  # after each round of the living daemons: is the role unheld?
            if hosts.admin.get(hosts.keys.placer) is None:
                vacant_rounds.append(1)

        hosts.cycle_until(lambda: h2.placer.leading or hosts.daemons["s1"].placer.leading, 15, "a new placer", vacant)
        # The role is taken in the round that first reads the dead placer's key gone (its lease expired), or
        # the next one when it expired after both living daemons had read it: never left vacant longer.
        assert len(vacant_rounds) <= 1, vacant_rounds
        hosts.cycle_until(lambda: hosts.runs("h2", "el", 0, epoch=2), 15, "group 0 moved to h2 by the new placer")
    finally:
        hosts.close()


def test_a_quiet_host_asks_etcd_nothing_between_renewals_and_reads_when_its_watch_sees_a_change(
    etcd: EtcdCluster, tmp_path: Path
) -> None:
    # Leases long enough that a host this test does not cycle keeps its own meanwhile (etcd counts real time).
    hosts = Hosts(etcd, tmp_path, "quiet", [HostEntry("h1"), HostEntry("h2")], ttl_s=60, margin_s=2)
    try:
        hosts.submit(job(tmp_path, "q", 2, SLEEPER))
        hosts.cycle_until(lambda: hosts.runs("h1", "q", 0) and hosts.runs("h2", "q", 1), 20, "both groups run")
        h2 = next(d for d in hosts.daemons.values() if not d.placer.leading)
        lead = next(d for d in hosts.daemons.values() if d.placer.leading)
        at = h2.lease.renewed_at
        assert at is not None and h2.reader.watch is not None and h2.reader.watch.alive

        def made(clock: float) -> int:
            h2.clock, before = (lambda: clock), h2.store.requests_made
            h2.cycle()
            return h2.store.requests_made - before

        lead.cycle()  # the placer's own writes read back: quiet from here on
        # Its watch delivers them on a thread of its own: wait for it (found by CI: on a loaded machine they came
        # after the next cycle, whose renewal then carried their revision and a read followed it).
        newest = max(e.mod_revision for e in hosts.admin.prefix(hosts.keys.root)[1])
        wait_until(
            lambda: (
                h2.reader.watch is not None
                and max(h2.reader.watch.newest, h2.reader.seen[0] if h2.reader.seen else 0) >= newest
            ),
            10,
            "the watch to see the writes",
        )
        made(at)  # reads what changed since its last read (the placer's writes, its own)
        seen = h2.reader.seen
        every = renew_every(h2.ttl_s, h2.margin_s)
        assert made(at + every / 2) == 0  # no renewal due, nothing changed: not one request
        assert made(at + every) == 1 and h2.lease.renewed_at == at + every  # the renewal, and no read
        assert h2.reader.seen is seen
        # Something under the cluster's prefix changes: the watch says so, and the next cycle reads.
        hosts.admin.put(hosts.keys.root + "note", "x")
        wait_until(
            lambda: h2.reader.watch is not None and h2.reader.watch.newest > seen[0], 10, "the watch to see the write"
        )
        assert made(at + every) == 1 and h2.reader.seen is not seen and h2.reader.seen is not None
        assert any(e.key == hosts.keys.root + "note" for e in h2.reader.seen[1])
        # The placer between its renewals: nothing either (it made 3 requests a cycle to keep its role, and one
        # read per job besides the host's own).
        kept = lead._placer_kept_at
        assert kept is not None and lead.lease.renewed_at is not None
        lead.clock = lambda: max(kept, lead.lease.renewed_at or 0) + 0.01
        lead.cycle()  # reads what h2 and the note changed
        before = lead.store.requests_made
        lead.cycle()
        assert lead.store.requests_made == before
        # The watch ends (a member went): the next cycle reads, and opens another from that read (at once
        # here: its last renewal interval is over).
        h2.reader.watch.close()
        wait_until(lambda: h2.reader.watch is not None and not h2.reader.watch.alive, 10, "the watch to end")
        seen = h2.reader.seen
        assert made(at + 2 * every) == 3  # the renewal (due again), a read, a new watch
        assert h2.reader.seen is not seen and h2.reader.watch.alive
        assert made(at + 2 * every) == 0
    finally:
        hosts.close()


def test_a_spec_that_does_not_parse_is_refused_and_the_hosts_keep_running(etcd: EtcdCluster, tmp_path: Path) -> None:
    """Found here: a host parsed every spec it read and raised on one that did not parse, so whoever could
    write one malformed spec into etcd (bypassing `lamplighter submit`) stopped every host daemon at once."""
    hosts = Hosts(etcd, tmp_path, "bad", [HostEntry("h1")])
    try:
        hosts.admin.put(hosts.keys.spec(USER, "garbage"), "{not json")
        hosts.admin.put(hosts.keys.spec(USER, "invalid"), json.dumps({"name": "invalid", "groups": {"count": 0}}))
        hosts.admin.put(hosts.keys.spec(USER, "renamed"), job(tmp_path, "other", 1, SLEEPER).model_dump_json())
        hosts.submit(job(tmp_path, "fine", 1, SLEEPER))
        hosts.cycle_until(lambda: hosts.runs("h1", "fine", 0), 20, "the valid job runs beside them")
        refused = hosts.daemons["h1"].status()["refused"]
        assert isinstance(refused, dict) and set(refused) == {"garbage", "invalid", "renamed"}
        assert "not a valid job config" in refused["garbage"] and "groups.count" in refused["invalid"]
        assert "names another job ('other')" in refused["renamed"]
        said = hosts.admin.get(hosts.keys.refused("invalid", "h1"))
        assert said is not None and "groups.count" in json.loads(said.value)["reason"]
    finally:
        hosts.close()
