"""After a failed step, the reference trainer closes its process group at once (ft_setup.release_peers): a peer
still waiting for its share of the abandoned collective fails then, not at the collectives' timeout (#16: the
soak's survivor stalled pg_timeout_s when a group was killed mid-step). Real torchft Gloo groups, real gloo."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from realparts import in_threads
from torchft.process_group import ProcessGroupGloo, reconfigure_with_store

from lamplighter.trainer.ft_setup import FtParts, release_peers

PATIENCE = timedelta(seconds=60)  # a wait that ends by timeout says so ("Timed out"): the test then fails


def test_a_peer_waiting_in_a_collective_fails_when_this_group_lets_go() -> None:
    host = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=20))
    pgs = [ProcessGroupGloo(timeout=PATIENCE) for _ in range(2)]
    assert (
        in_threads(
            lambda rank: reconfigure_with_store(
                pgs[rank], f"127.0.0.1:{host.port}/pair", rank, 2, timedelta(seconds=20)
            )
        )
        == []
    )

    # Group 1 waits for group 0's share of an allreduce that group 0 abandoned (its step failed on a dead member).
    waited: list[str] = []

    def peer() -> None:
        try:
            pgs[1].allreduce([torch.ones(4)], dist.AllreduceOptions()).wait()
            waited.append("completed")
        except Exception as e:
            waited.append(str(e))

    waiter = threading.Thread(target=peer)
    waiter.start()
    release_peers(cast(FtParts, _Parts(pgs[0])))
    waiter.join(PATIENCE.total_seconds() + 30)
    assert len(waited) == 1 and waited[0] != "completed"
    assert "Timed out" not in waited[0] and "Connection" in waited[0], waited[0]


class _Parts:
    def __init__(self, pg: Any) -> None:
        self.pg = pg
