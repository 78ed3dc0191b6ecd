"""Building torchft's pieces for one trainer process: TCPStore, process group, transport, Manager."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lamplighter.configs.schema import JobConfig
from lamplighter.trainer.identity import Identity
from lamplighter.trainer.quick_rendezvous import quick_rendezvous_gloo
from lamplighter.trainer.rendezvous_bound import RendezvousBound

if TYPE_CHECKING:
    import torch
    from torchft.manager import Manager

    from lamplighter.trainer.train_state import TrainState


def torchft_replica_id(job: str, replica_id: int) -> str:
    """The replica id the Manager announces (torchft appends ':<uuid>'); ends in the group index."""
    return f"{job}_{replica_id}"


def choose_device(job: JobConfig, ident: Identity) -> torch.device:
    """cuda:LOCAL_RANK for NCCL/RCCL when GPUs exist and the config allows, else CPU (gloo)."""
    import torch

    backend = job.trainer.backend
    if backend == "nccl" and not torch.cuda.is_available():
        raise ValueError(f"job {job.name}: trainer.backend is 'nccl' but this node has no GPU torch can use")
    if backend in ("nccl", "auto") and torch.cuda.is_available():
        return torch.device("cuda", ident.local_rank)
    return torch.device("cpu")


@dataclass
class FtParts:
    manager: Manager
    store: Any  # the TCPStore this process hosts (group rank 0), kept alive for the group
    pg: Any  # torchft's process group, given to the Manager


def release_peers(parts: FtParts) -> None:
    """Close this process group at once after a step that failed (torchft makes a new one at the next quorum:
    a commit failure bumps the quorum id, and every member reconfigures).

    gloo fails only the connections to a member that died. A survivor that was waiting for this group's share
    of the abandoned collective keeps waiting, for pg_timeout_s, unless this group's connections close (three
    processes, a member SIGKILLed mid-step: the other survivor waited out its timeout in 2 runs of 8). Closing
    them fails its wait at once, and every survivor asks for the next quorum together.
    """
    parts.pg.abort()


def rendezvous_bound(setting: int | str, pg_timeout: timedelta) -> RendezvousBound:
    """torchft.rendezvous_timeout_ms as a bound: 'adaptive' learns up to pg_timeout, a number stays fixed."""
    if setting == "adaptive":
        return RendezvousBound(ceiling=pg_timeout)  # its floor, 300 ms, is below any pg_timeout_s (whole seconds)
    assert isinstance(setting, int), setting  # the schema admits nothing else
    return RendezvousBound.fixed(timedelta(milliseconds=setting))


def build_manager(
    job: JobConfig, ident: Identity, state: TrainState, device: torch.device, log: Callable[[str], None]
) -> FtParts:
    """Host the group's TCPStore (rank 0), create the process group, the transport and the Manager."""
    import torch.distributed as dist
    from torchft.manager import Manager
    from torchft.process_group import ProcessGroupGloo, ProcessGroupNCCL

    from lamplighter.trainer.heal_transport import weights_only_http_transport

    ft = job.torchft
    pg_timeout = timedelta(seconds=ft.pg_timeout_s)
    timeout = timedelta(seconds=ft.timeout_s)
    store = None
    port = ident.master_port
    if ident.rank == 0:
        store = dist.TCPStore(
            host_name=ident.master_addr,
            port=port,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=ft.connect_timeout_s),
        )
        port = store.port  # MASTER_PORT=0: the port the OS picked
    pg: ProcessGroupGloo | ProcessGroupNCCL
    if device.type == "cuda":
        pg = ProcessGroupNCCL(timeout=pg_timeout)
    elif ft.rendezvous_timeout_ms is None:
        pg = ProcessGroupGloo(timeout=pg_timeout)
    else:
        pg = quick_rendezvous_gloo(rendezvous_bound(ft.rendezvous_timeout_ms, pg_timeout), pg_timeout, log)
    # torchft's HTTP transport, loading with weights_only=True (a heal never unpickles code) into the trainer's own
    # tensors (heal_transport.py).
    transport: Any = weights_only_http_transport(timeout, receive_into=state.receive_into)
    if job.trainer.checkpoint_transport == "pg":
        from torchft.checkpointing.pg_transport import PGTransport

        transport = PGTransport(pg, timeout=timeout, device=device, state_dict=state.receive_into)
    manager = Manager(
        pg=pg,
        load_state_dict=state.load_state_dict,
        state_dict=state.state_dict,
        min_replica_size=job.lighthouse.min_replicas,
        # Synchronous quorum: a healing group receives the state before its forward
        # pass and takes part in the same step with its own data slice, so its
        # step number and cursor are right from the first step.
        use_async_quorum=False,
        timeout=timeout,
        quorum_timeout=timedelta(seconds=ft.quorum_timeout_s),
        connect_timeout=timedelta(seconds=ft.connect_timeout_s),
        rank=ident.rank,
        world_size=ident.world_size,
        store_addr=ident.master_addr,
        store_port=port,
        lighthouse_addr=ident.lighthouse,
        replica_id=torchft_replica_id(ident.job, ident.replica_id),
        heartbeat_interval=timedelta(milliseconds=ft.heartbeat_interval_ms),
        checkpoint_transport=transport,
        # Weights come from the config's seed, identical everywhere: no transfer at step 0.
        init_sync=False,
    )
    return FtParts(manager=manager, store=store, pg=pg)
