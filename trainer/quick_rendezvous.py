"""torchft's Gloo process group with two bounds: one for setting it up after each quorum, one for collectives.

torchft-nightly 2026.10.26 bounds both with the one timeout it is given
(process_group.py: ProcessGroupWrapper.reconfigure connects to the quorum's
store with it, ProcessGroupGloo._create_pg passes it to gloo's rendezvous and
makes it the collectives' default). A member that dies just before or just
after a quorum forms never joins the new group's rendezvous, so every survivor
waits for it the whole pg_timeout_s (and up to 5 times as long when it died
part-way through). Here the rendezvous has its own, shorter bound, and the
collectives get the usual one back once the group exists.

torch and torchft are imported when the first group is made, not with this module (a node's
plain install has neither).
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any


def quick_rendezvous_gloo(rendezvous: timedelta, collectives: timedelta) -> Any:
    """A torchft ProcessGroupGloo whose setup after each quorum is bounded by `rendezvous`, its collectives by
    `collectives` (pass it to torchft's Manager as `pg`)."""
    return _group_class()(rendezvous, collectives)


@functools.cache
def _group_class() -> type:
    import torch
    from torchft.process_group import ProcessGroupGloo

    class QuickRendezvousGloo(ProcessGroupGloo):
        def __init__(self, rendezvous: timedelta, collectives: timedelta) -> None:
            super().__init__(timeout=rendezvous)  # what reconfigure and the gloo rendezvous use
            self.collectives_timeout = collectives

        def _create_pg(self, store: Any, rank: int, world_size: int) -> Any:
            pg = super()._create_pg(store, rank, world_size)
            pg._get_backend(torch.device("cpu"))._set_default_timeout(self.collectives_timeout)
            return pg

    return QuickRendezvousGloo
