"""Election, placement and host liveness against a real etcd (Debian's etcd-server) on loopback."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lamplighter.bare.etcd_store import EtcdError, Store, created_at, delete, mod_revision_is, put, value_is
from lamplighter.bare.host_lease import HostLease
from lamplighter.bare.keys import Keys
from lamplighter.bare.placement import Assignment, place
from lamplighter.bare.placer import HostEntry, Placer
from lamplighter.lab.etcd_cluster import EtcdCluster, started_total

pytestmark = pytest.mark.integration

HOSTS = [HostEntry("h1"), HostEntry("h2"), HostEntry("s1", spare=True)]


def until(cond: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll a condition that etcd's own clock makes true (a lease's TTL); fail with what was awaited."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(tmp_path_factory.mktemp("etcd"), size=3) as cluster:
        yield cluster


@pytest.fixture
def store(etcd: EtcdCluster) -> Iterator[Store]:
    s = Store(etcd.endpoints, timeout_s=1.0)
    yield s
    s.close()


def register(store: Store, keys: Keys, *names: str) -> dict[str, HostLease]:
    leases = {n: HostLease(store, keys, n, ttl_s=2, info={"host": n}) for n in names}
    for lease in leases.values():
        assert lease.renew(time.monotonic())
    return leases


def test_one_placer_is_elected_and_a_deposed_one_cannot_write(store: Store, request: pytest.FixtureRequest) -> None:
    keys = Keys(f"c-{request.node.name[:40]}")
    register(store, keys, "h1", "h2", "s1")
    store.put(keys.spec("u", "job"), "{}")  # submitted (the placer places only submitted jobs)
    a, b = Placer(store, keys, "h1", ttl_s=2), Placer(store, keys, "h2", ttl_s=2)
    assert a.campaign() == "h1" and b.campaign() == "h1"
    assert a.leading and not b.leading
    assert b.step("job", keys.spec("u", "job"), 2, HOSTS) == []  # a follower moves nothing
    moves = a.step("job", keys.spec("u", "job"), 2, HOSTS)
    assert [(m.group, m.new.host, m.new.epoch) for m in moves] == [(0, "h1", 1), (1, "h2", 1)]
    # h1 stops renewing (dead): its placer key goes with its lease, and h2 takes the role.
    until(lambda: b.campaign() == "h2", 10, "h2 becomes the placer after h1's lease expired")
    assert b.leading
    # h1 still believes it leads (it has not campaigned since): its write is refused, nothing changes.
    before = store.get(keys.group("job", 0))
    assert a.leading
    assert a.step("job", keys.spec("u", "job"), 2, [HostEntry("s1", spare=True), HostEntry("h2")]) == []
    assert [m.group for m in a.refused] == [0, 1]
    assert store.get(keys.group("job", 0)) == before


def test_a_group_moves_to_the_spare_when_its_hosts_lease_expires(store: Store, request: pytest.FixtureRequest) -> None:
    keys = Keys(f"c-{request.node.name[:40]}")
    leases = register(store, keys, "h1", "h2", "s1")
    store.put(keys.spec("u", "job"), "{}")
    placer = Placer(store, keys, "h1", ttl_s=2)
    placer.campaign()
    placer.step("job", keys.spec("u", "job"), 2, HOSTS)

    def h2_dead() -> bool:
        leases["h1"].renew(time.monotonic())
        leases["s1"].renew(time.monotonic())
        placer.campaign()
        return not next(h for h in placer.read("job", keys.spec("u", "job"), HOSTS).hosts if h.name == "h2").alive

    until(h2_dead, 10, "h2's lease expires while the others renew")
    [m] = placer.step("job", keys.spec("u", "job"), 2, HOSTS)
    assert (m.group, m.new.host, m.new.epoch) == (1, "s1", 2)
    got = store.get(keys.group("job", 1))
    assert got is not None and Assignment.from_json(got.value) == m.new


def test_the_placer_never_places_a_cancelled_job(store: Store, request: pytest.FixtureRequest) -> None:
    keys = Keys(f"c-{request.node.name[:40]}")
    register(store, keys, "h1", "h2", "s1")
    placer = Placer(store, keys, "h1", ttl_s=2)
    placer.campaign()
    assert placer.step("job", keys.spec("u", "job"), 1, HOSTS) == []  # not submitted
    store.put(keys.spec("u", "job"), "{}")
    view = placer.read("job", keys.spec("u", "job"), HOSTS)
    store.txn("cancel", [], [delete(keys.spec("u", "job"))])  # between read and write
    store.put(keys.spec("u", "job"), "{}")  # and submitted again: a new submission, not the one read
    [move] = place(1, view.assigned, view.hosts)
    ok = store.txn(
        "a placement from before the cancel",
        [
            value_is(keys.placer, "h1"),
            mod_revision_is(keys.group("job", 0), 0),
            created_at(keys.spec("u", "job"), view.spec_created),
        ],
        [put(keys.group("job", 0), move.new.to_json())],
    )
    assert not ok and store.get(keys.group("job", 0)) is None


def test_the_store_rides_through_a_dead_etcd_member(etcd: EtcdCluster, request: pytest.FixtureRequest) -> None:
    keys = Keys(f"c-{request.node.name[:40]}")
    # The member the store asks first dies; it is a follower, so the cluster keeps its leader. (A dead
    # leader stalls every write for etcd's election, about a second: a CI run saw a write time out then.)
    first = next(i for i in range(len(etcd.members)) if i != etcd.leader())
    order = [first] + [i for i in range(len(etcd.members)) if i != first]
    store = Store([etcd.endpoints[i] for i in order], timeout_s=1.0)
    store.put(keys.root + "x", "1")
    etcd.kill(first)
    try:
        assert store.put(keys.root + "x", "2") > 0
        entry = store.get(keys.root + "x")
        assert entry is not None and entry.value == "2"
    finally:
        etcd.restart(first)
        store.close()


def test_an_unreachable_etcd_is_an_error_that_names_every_endpoint(tmp_path: Path) -> None:
    from lamplighter.system.ports import free_port

    ends = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    store = Store(ends, timeout_s=0.5)
    with pytest.raises(EtcdError) as e:
        store.get("/lamplighter/x")
    assert all(end in str(e.value) for end in ends) and "read /lamplighter/x" in str(e.value)
    with pytest.raises(ValueError, match="expected http"):
        Store(["127.0.0.1:2379"])


def test_a_call_past_its_deadline_asks_no_member(store: Store, request: pytest.FixtureRequest) -> None:
    """A host daemon's calls end by its fence deadline (host_daemon.cycle): once it has passed, none is sent."""
    key = Keys(f"c-{request.node.name[:40]}").root + "x"
    store.put(key, "1")
    asked = store.requests_made
    with store.until(10.0, lambda: 10.5), pytest.raises(EtcdError, match="deadline had passed") as e:
        store.get(key)
    assert store.requests_made == asked and all(end in str(e.value) for end in store.endpoints)
    with store.until(10.0, lambda: 9.5):  # time left: asked, with at most that long to answer
        entry = store.get(key)
    assert entry is not None and entry.value == "1"
    with store.until(10.0, lambda: 10.5):
        pass
    assert store.get(key) is not None  # the deadline ends with its block


def test_a_watch_sees_writes_after_its_revision_and_closes_while_the_cluster_is_quiet(store: Store) -> None:
    """Found by the etcd scale bench: closing the response under its reading thread waited on the reader's
    lock for as long as nothing changed, so a host daemon on a quiet cluster never finished stopping."""
    rev = store.put("/w/before", "1")
    watch = store.watch("/w/", rev)
    other = store.watch("/x/", rev)
    store.put("/x/elsewhere", "1")
    until(lambda: other.newest > rev, 10, "the other watch to see its write")
    assert watch.newest == 0  # a write outside the prefix is not its business
    at = store.put("/w/after", "2")
    until(lambda: watch.newest == at, 10, "the watch to see the write")
    assert store.seen_revision >= at  # every answer's revision is kept (a lease renewal's too)
    watch.close()
    watch._thread.join(timeout=10)
    assert not watch._thread.is_alive() and not watch.alive
    other.close()


def test_etcds_own_count_of_requests_served_sees_each_request(
    etcd: EtcdCluster, store: Store, request: pytest.FixtureRequest
) -> None:
    """What `make scale`'s bare-metal arm counts a host's requests by: the members' own metrics, not the client's."""
    key = f"/count/{request.node.name}"
    before = etcd.requests_served()
    for i in range(3):
        store.put(key, str(i))
    assert store.get(key) is not None
    assert etcd.requests_served() - before == 4
    text = "\n".join(
        [
            "# TYPE grpc_server_started_total counter",
            'grpc_server_started_total{grpc_method="Put",grpc_service="etcdserverpb.KV",grpc_type="unary"} 3',
            'grpc_server_started_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 1',
            'grpc_server_handled_total{grpc_code="OK",grpc_method="Put",grpc_service="etcdserverpb.KV"} 3',
        ]
    )
    assert started_total(text) == 4
