"""The renewal helper: when a group may leave before its time limit, the lease, and the requeue."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from lamplighter.lighthouse.status import (
    Heartbeat,
    LighthouseStatus,
    LighthouseStatusError,
    Member,
)
from lamplighter.slurm.injob.renew import Lease, LeaseDir, Timeline, decide, end_time_epoch, live_groups, renew_group
from lamplighter.slurm.parsers import JobInfo


def status(
    live: dict[int, str], old: tuple[int, ...] = (), quorum: int = 7, healing: tuple[int, ...] = ()
) -> LighthouseStatus:
    """A Lighthouse page: `live` groups in the last quorum (replica ids 'g<N>:<uuid>'), `old` ones silent,
    `healing` ones just joined (at step 0, recovering)."""
    members = [Member(f"g{g}:{u}", 0 if g in healing else 10, "m", "s", 1, g in healing) for g, u in live.items()]
    beats = [Heartbeat(f"g{g}:{u}", 0.1, g in old) for g, u in live.items()]
    return LighthouseStatus(quorum, "", None, 0.5, members, beats)


def test_live_groups_are_quorum_members_with_fresh_heartbeats_that_have_healed() -> None:
    assert live_groups(status({0: "a", 1: "b", 2: "c"}, old=(2,))) == {0: "g0:a", 1: "g1:b"}
    # A group that just joined is in the quorum, but still receiving the weights: not back yet.
    assert live_groups(status({0: "a", 1: "b"}, healing=(1,))) == {0: "g0:a"}
    behind = LighthouseStatus(
        7,
        "",
        None,
        0.5,
        [Member("g0:a", 10, "m", "s", 1, False), Member("g1:b", 3, "m", "s", 1, False)],
        [Heartbeat("g0:a", 0.1, False), Heartbeat("g1:b", 0.1, False)],
    )
    assert live_groups(behind) == {0: "g0:a"}


@pytest.mark.parametrize(
    ("live", "leases", "now", "renew", "why"),
    [
        ({0: "a", 1: "b", 2: "c"}, [], 0, True, "all 2 other group(s) live"),
        ({1: "b", 2: "c"}, [], 0, False, "has not caught up since its start"),  # just started: train first
        ({1: "b", 2: "c"}, [], 100, True, "all 2 other group(s) live"),  # ...unless the limit is near
        ({0: "a", 2: "c"}, [], 0, False, "waiting for group(s) 1"),
        ({0: "a", 1: "b", 2: "c"}, [Lease(3, 1, "g1:b", 0)], 0, False, "group(s) 1 renewing"),
        ({0: "a", 1: "B", 2: "c"}, [Lease(3, 1, "g1:b", 0)], 0, True, "all 2"),  # group 1 back, new uuid
        ({0: "a", 1: "b", 2: "c"}, [Lease(3, 0, "g0:z", 0)], 0, True, "all 2"),  # our own old lease
        # From the deadline on, one other live group that is not renewing is enough...
        ({0: "a", 2: "c"}, [], 100, True, "time limit near: 1 of 2"),
        # ...but not one that has just taken a lease to leave: then hold on, we have the state.
        ({0: "a", 2: "c"}, [Lease(4, 2, "g2:c", 99)], 100, False, "holding on past the renewal deadline"),
        ({0: "a"}, [], 100, False, "holding on"),
        # A lease without a replica id is released once its group is live again, some time later.
        ({0: "a", 1: "b", 2: "c"}, [Lease(3, 1, None, 0)], 10, False, "renewing"),
        ({0: "a", 1: "b", 2: "c"}, [Lease(3, 1, None, 0)], 40, True, "all 2"),
    ],
)
def test_decide(live: dict[int, str], leases: list[Lease], now: float, renew: bool, why: str) -> None:
    d = decide(0, 3, status(live), leases, now, deadline=50 if now < 100 else 100)
    assert (d.renew, why in d.reason) == (renew, True), d


def test_decide_unreadable_lighthouse_waits() -> None:
    assert decide(0, 2, None, [], 0, 50).reason == "Lighthouse unreadable"
    assert not decide(0, 2, None, [], 60, 50).renew  # nobody known live: hold on
    assert decide(0, 1, status({0: "a"}), [], 0, 50).renew  # one group: nobody to wait for
    assert not decide(0, 1, status({}), [], 0, 50).renew  # ...once it has caught up


def test_lease_is_exclusive(tmp_path: Path) -> None:
    leases = LeaseDir(tmp_path / "renewal")
    assert leases.latest() is None
    first = leases.take(None, 0, "g0:a", 1.0)
    assert first == Lease(1, 0, "g0:a", 1.0)
    assert leases.take(None, 1, "g1:b", 2.0) is None  # lease 1 is taken
    assert leases.latest() == first
    assert leases.take(first, 1, "g1:b", 2.0) == Lease(2, 1, "g1:b", 2.0)
    assert leases.latest() is not None and leases.latest().n == 2  # type: ignore[union-attr]
    # Many contenders for the same next lease: exactly one wins.
    results: list[Lease | None] = []
    threads = [
        threading.Thread(target=lambda g=g: results.append(leases.take(leases.latest(), g, None, 3.0)))
        for g in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r is not None and r.n == 3 for r in results) == 1


class FakeApi:
    def __init__(self, end_time: str) -> None:
        self.requeued: list[int] = []
        self.end_time = end_time

    def job(self, job_id: int) -> JobInfo:
        return JobInfo(job_id, "ll-x-g0", "RUNNING", None, 2, "n1", "n1", None, True, None, {"EndTime": self.end_time})

    def requeue(self, job_id: int) -> None:
        self.requeued.append(job_id)


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def run_renew(
    tmp_path: Path,
    pages: list[LighthouseStatus | None],
    start_left_s: float,
    me: int = 0,
    groups: int = 2,
    alive_polls: int = 10**9,
):
    end = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(1_800_000_000))
    clock = Clock(1_800_000_000 - start_left_s)
    api = FakeApi(end)
    it = iter(pages)
    last: list[LighthouseStatus | None] = [None]

    def read() -> LighthouseStatus:
        last[0] = next(it, last[0])
        if last[0] is None:
            raise LighthouseStatusError("down")
        return last[0]

    timeline = Timeline(tmp_path / "renewal" / f"g{me}.jsonl", clock=clock)
    polls = iter(range(alive_polls))
    d = renew_group(
        api,
        42,
        me,
        groups,
        read,
        LeaseDir(tmp_path / "renewal"),
        timeline,
        script_alive=lambda: next(polls, None) is not None,
        clock=clock,
        sleep=clock.sleep,
    )
    events = [json.loads(line) for line in (tmp_path / "renewal" / f"g{me}.jsonl").read_text().splitlines()]
    return d, api, events, clock


def test_renews_once_the_others_are_live(tmp_path: Path) -> None:
    pages: list[LighthouseStatus | None] = [None, status({0: "a"}), status({0: "a"}), status({0: "a", 1: "b"})]
    d, api, events, _ = run_renew(tmp_path, pages, start_left_s=100)
    assert d.renew and "all 1 other group(s) live" in d.reason and api.requeued == [42]
    assert [e["event"] for e in events] == ["warned", "waiting", "waiting", "requeued"]
    assert events[0]["left_s"] == 100 and events[0]["restarts"] == 2
    assert events[-1]["left_s"] == 97
    lease = LeaseDir(tmp_path / "renewal").latest()
    assert lease is not None and (lease.group, lease.replica) == (0, "g0:a")
    # Counted for the next run's LAMPLIGHTER_RENEWALS (per Slurm job: a new submission starts at 0).
    assert (tmp_path / "renewal" / "g0-42.renewals").read_text() == "1\n"


def test_waits_for_the_lease_holder_to_come_back(tmp_path: Path) -> None:
    LeaseDir(tmp_path / "renewal").take(None, 1, "g1:old", 0.0)
    pages = (
        [status({0: "a", 1: "old"})] * 3
        + [status({0: "a"})] * 3
        + [status({0: "a", 1: "new"}, healing=(1,))] * 2  # back, but still healing: keep waiting
        + [status({0: "a", 1: "new"})]
    )
    d, api, events, _ = run_renew(tmp_path, pages, start_left_s=100)
    assert api.requeued == [42] and d.renew
    reasons = [e.get("reason", "") for e in events]
    assert any("group(s) 1 renewing" in r for r in reasons)
    assert LeaseDir(tmp_path / "renewal").latest() == Lease(2, 0, "g0:a", pytest.approx(1_800_000_000 - 92, abs=1))


def test_near_the_limit_one_live_peer_is_enough(tmp_path: Path) -> None:
    d, api, events, _ = run_renew(tmp_path, [status({0: "a", 1: "b"})], start_left_s=30, groups=3)
    assert api.requeued == [42] and "time limit near: 1 of 2" in d.reason
    # Requeued at the guard (5 s before EndTime), not later.
    assert events[-1]["event"] == "requeued" and 4 <= events[-1]["left_s"] <= 5


def test_with_no_live_peer_it_holds_on_until_one_has_healed(tmp_path: Path) -> None:
    pages = [status({0: "a"})] * 40 + [status({0: "a", 1: "new"}, healing=(1,))] * 3 + [status({0: "a", 1: "new"})]
    _, api, events, _ = run_renew(tmp_path, pages, start_left_s=30)
    assert api.requeued == [42]
    # Past EndTime (left_s < 0) by then: it held on instead of leaving nobody with the state.
    assert events[-1]["left_s"] < 0
    assert any("holding on past the renewal deadline" in e.get("reason", "") for e in events)


def test_end_time_parses_scontrol_local_time() -> None:
    t = 1_800_000_000
    assert end_time_epoch({"EndTime": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))}) == t
    assert end_time_epoch({"EndTime": "Unknown"}) is None and end_time_epoch({}) is None


def test_stops_when_its_batch_script_is_gone_or_long_past_the_limit(tmp_path: Path) -> None:
    d, api, events, _ = run_renew(tmp_path, [status({0: "a"})], start_left_s=100, alive_polls=5)
    assert d is None and api.requeued == [] and events[-1]["event"] == "stopped"
    # Holding on with nobody to hand the state to ends 2 minutes past the limit at the latest.
    d, api, events, _ = run_renew(tmp_path / "b", [status({0: "a"})], start_left_s=10)
    assert d is None and api.requeued == [] and events[-1]["left_s"] <= -120
