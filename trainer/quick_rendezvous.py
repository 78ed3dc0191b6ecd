"""torchft's Gloo process group with two bounds: one for setting it up after each quorum, one for collectives.

torchft-nightly 2026.10.26 bounds both with the one timeout it is given
(process_group.py: ProcessGroupWrapper.reconfigure connects to the quorum's
store with it, ProcessGroupGloo._create_pg passes it to gloo's rendezvous and
makes it the collectives' default). A member that dies just before or just
after a quorum forms never joins the new group's rendezvous, so every survivor
waits for it the whole pg_timeout_s (and up to 5 times as long when it died
part-way through). Here the setup has its own bound (trainer/rendezvous_bound.py:
learnt from the group's own setups, or fixed), and the collectives get the usual
one back once the group exists.

torch and torchft are imported when the first group is made, not with this module (a node's
plain install has neither).
"""

from __future__ import annotations

import functools
import json
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from lamplighter.trainer.rendezvous_bound import FLOOR_MEMBERS, RendezvousBound

SETUP_FAILED = "process group setup failed after"  # how the trainer's log says so (lab/survivor_stall counts it)


def quick_rendezvous_gloo(
    rendezvous: timedelta | RendezvousBound,
    collectives: timedelta,
    log: Callable[[str], None] = lambda _msg: None,
) -> Any:
    """A torchft ProcessGroupGloo whose setup after each quorum is bounded by `rendezvous` (a fixed time, or a
    bound that learns), its collectives by `collectives` (pass it to torchft's Manager as `pg`). `log` hears of
    each setup that timed out."""
    bound = rendezvous if isinstance(rendezvous, RendezvousBound) else RendezvousBound.fixed(rendezvous)
    return _group_class()(bound, collectives, log)


@functools.cache
def _group_class() -> type:
    import torch
    from torchft.process_group import ProcessGroupGloo

    class QuickRendezvousGloo(ProcessGroupGloo):
        def __init__(self, bound: RendezvousBound, collectives: timedelta, log: Callable[[str], None]) -> None:
            super().__init__(timeout=bound.current())  # what reconfigure and the gloo rendezvous use
            self.bound = bound
            self.collectives_timeout = collectives
            self._log = log

        def reconfigure(self, opts: Any) -> Any:
            handles = getattr(opts, "handles", None)
            members = len(handles) if isinstance(handles, list) and handles else FLOOR_MEMBERS
            limit = self.bound.current(members)
            self.set_timeout(limit)
            start = time.monotonic()
            try:
                check_store_reachable(handles, limit)
                work = super().reconfigure(opts)
            except Exception as e:
                self.bound.failed()
                self._log(
                    f"{SETUP_FAILED} {time.monotonic() - start:.2f} s (bound {_ms(limit)}, {members} groups): "
                    f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; "
                    f"next bound {_ms(self.bound.current(members))}"
                )
                raise
            self.bound.succeeded(time.monotonic() - start, members)
            return work

        def _create_pg(self, store: Any, rank: int, world_size: int) -> Any:
            pg = super()._create_pg(store, rank, world_size)
            pg._get_backend(torch.device("cpu"))._set_default_timeout(self.collectives_timeout)
            return pg

    return QuickRendezvousGloo


def check_store_reachable(handles: object, limit: timedelta) -> None:
    """Connect once to the quorum's store (the first member's) within `limit`, or raise ConnectionError.

    c10d's TCPStore client retries a failed connect after about a second, whatever its timeout: a quorum
    whose first member just died held the survivors 1.13 s against a 300 ms bound (Slurm lab, a GPU fault
    and a node crash at once). One plain connect fails at once when nobody listens there any more.
    Handles torchft does not describe as a list of JSON objects with a "store" of host:port are left to it.
    """
    try:
        store = json.loads(handles[0])["store"] if isinstance(handles, list) and handles else None
        host, _, port = str(store).rpartition(":")
        address = (host.strip("[]"), int(port))
    except (ValueError, KeyError, TypeError):
        return
    try:
        socket.create_connection(address, timeout=max(limit.total_seconds(), 0.05)).close()
    except OSError as e:
        raise ConnectionError(f"the quorum's store {store} is unreachable: {e}") from e


def _ms(t: timedelta) -> str:
    return f"{t.total_seconds() * 1000:.0f} ms"
