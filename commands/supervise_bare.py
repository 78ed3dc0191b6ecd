"""The bare-metal role's host daemon, built from a node config (`lamplighter supervise`, role bare-metal)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from lamplighter.bare.host_daemon import HostDaemon
from lamplighter.bare.keys import Keys
from lamplighter.bare.placer import HostEntry
from lamplighter.commands.bare_jobs import store_for
from lamplighter.configs.schema import NodeConfig
from lamplighter.supervisor.gpu.check import GpuCheck
from lamplighter.supervisor.gpu.worker import WorkerSpec


def bare_host(cfg: NodeConfig, node: str, clock: Callable[[], float], env: Mapping[str, str]) -> HostDaemon:
    """The host daemon; with `gpus: true` its GPUs are checked as on a Slurm node (a fault takes the host out)."""
    bm = cfg.bare_metal
    if bm is None:
        raise ValueError("role bare-metal needs bare_metal in the node config")
    if node not in bm.hosts + bm.spares:
        raise ValueError(f"this host {node!r} is in neither bare_metal.hosts nor bare_metal.spares: set node_name")
    hosts = [HostEntry(h) for h in bm.hosts] + [HostEntry(h, spare=True) for h in bm.spares]
    return HostDaemon(
        store_for(bm.etcd),
        Keys(bm.cluster),
        node,
        hosts,
        Path(cfg.state_dir) / "bare",
        clock,
        ttl_s=bm.lease_ttl_s,
        margin_s=bm.fence_margin_s,
        gpus=_gpu_check(cfg, env) if cfg.gpus else None,
        trainer_users=bm.trainer_users,
        root_trainers=bm.root_trainers,
        confined=bm.etcd.insecure_lab,  # a test machine: etcd is not asked what this host may write
        daemon_env=dict(env),
    )


def _gpu_check(cfg: NodeConfig, env: Mapping[str, str]) -> GpuCheck:
    return GpuCheck(cfg.health, WorkerSpec(env=dict(env)))
