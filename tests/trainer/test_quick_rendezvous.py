"""The reference trainer's Gloo group with its own rendezvous bound (#16: survivors' stall): a member that never
comes fails the rendezvous at that bound, not at the collectives' one, and the group, once up, runs its
collectives under the collectives' bound; a bound that learns follows real setups. Real gloo, a real TCPStore;
one client per member."""

from __future__ import annotations

import json
import socket
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist
from realparts import in_threads

from lamplighter.trainer.quick_rendezvous import check_store_reachable, quick_rendezvous_gloo
from lamplighter.trainer.rendezvous_bound import FLOOR, RendezvousBound


@pytest.fixture
def store() -> Any:
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=20))


def client(store: Any, prefix: str) -> Any:
    own = dist.TCPStore("127.0.0.1", store.port, is_master=False, timeout=timedelta(seconds=20))
    return dist.PrefixStore(prefix, own)


def test_a_member_that_never_comes_fails_the_rendezvous_at_its_own_bound(store: Any) -> None:
    pg = quick_rendezvous_gloo(rendezvous=timedelta(milliseconds=150), collectives=timedelta(seconds=30))
    with pytest.raises(dist.DistStoreError, match="wait timeout after 150ms"):
        pg._create_pg(client(store, "alone"), 0, 2)


def test_once_up_the_group_runs_collectives_under_the_collectives_bound(store: Any) -> None:
    results: dict[int, tuple[list[float], timedelta]] = {}

    def member(rank: int) -> None:
        pg = quick_rendezvous_gloo(rendezvous=timedelta(seconds=10), collectives=timedelta(seconds=7))
        group = pg._create_pg(client(store, "both"), rank, 2)
        t = torch.ones(3) * (rank + 1)
        group.allreduce([t]).wait()
        results[rank] = (t.tolist(), group._get_backend(torch.device("cpu")).options._timeout)

    assert in_threads(member) == []
    assert results == {r: ([3.0, 3.0, 3.0], timedelta(seconds=7)) for r in (0, 1)}


def test_a_learning_bound_measures_real_setups_and_a_missing_member_fails_at_it_then_doubles_it() -> None:
    """torchft's own reconfigure path: handles as the Lighthouse hands them out, the store of the first."""
    from torchft.process_group import ReconfigureOptions, reconfigure_with_store

    heard: list[str] = []
    bound = RendezvousBound(ceiling=timedelta(seconds=20))
    pgs = [quick_rendezvous_gloo(bound, timedelta(seconds=20), heard.append)] + [
        quick_rendezvous_gloo(RendezvousBound(ceiling=timedelta(seconds=20)), timedelta(seconds=20)) for _ in range(2)
    ]
    host = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=20))
    errors = in_threads(
        lambda rank: reconfigure_with_store(pgs[rank], f"127.0.0.1:{host.port}/first", rank, 2, timedelta(seconds=20))
    )
    assert errors == [] and len(bound.recent) == 1 and heard == []
    assert bound.current() == FLOOR  # a setup on loopback takes far less than FLOOR / MARGIN

    # The next quorum takes in the third group, which never sets up (it died right after asking).
    opts = ReconfigureOptions()
    opts.uuid = 7
    opts.handles = [pgs[0].get_reconfigure_handle(), pgs[2].get_reconfigure_handle()]
    with pytest.raises(dist.DistStoreError, match=f"wait timeout after {FLOOR.total_seconds() * 1000:.0f}ms"):
        pgs[0].reconfigure(opts).wait()
    assert bound.current() == 2 * FLOOR
    assert len(heard) == 1 and "process group setup failed after" in heard[0] and "next bound 600 ms" in heard[0]


def test_a_quorum_whose_store_is_gone_fails_at_once_not_after_c10d_connect_retries() -> None:
    """The first member (it hosts the quorum's store) died: nobody listens on its port any more."""
    from torchft.process_group import ReconfigureOptions

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]  # closed when the block ends: a connect there is refused
    heard: list[str] = []
    bound = RendezvousBound(ceiling=timedelta(seconds=20))
    pg = quick_rendezvous_gloo(bound, timedelta(seconds=20), heard.append)
    opts = ReconfigureOptions()
    opts.uuid = 3
    dead = json.dumps({"id": "dead-member", "store": f"127.0.0.1:{dead_port}", "global_rank": None})
    opts.handles = [dead, pg.get_reconfigure_handle()]
    with pytest.raises(ConnectionError, match=f"the quorum's store 127.0.0.1:{dead_port} is unreachable"):
        pg.reconfigure(opts)
    assert bound.current() == 2 * FLOOR and len(heard) == 1


def test_handles_in_a_form_it_does_not_know_are_left_to_torchft() -> None:
    check_store_reachable(["not json"], timedelta(milliseconds=100))
    check_store_reachable(None, timedelta(milliseconds=100))
    check_store_reachable([json.dumps({"id": "x"})], timedelta(milliseconds=100))
