"""Check this node's GPUs once and act on the verdict in Slurm: what `healthcheck` and `nodes resume` share.

Which node and which thresholds: the node config (node.yaml) when there is
one, so the one-shot check judges with the daemon's thresholds; the node name
from --node, else SLURMD_NODENAME (set by slurmd for HealthCheckProgram and
Prolog), else the config's node_name, else the host name.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

from lamplighter.configs.loader import load_node
from lamplighter.configs.schema import NodeConfig

DEFAULT_NODE_CONFIG = Path("/etc/lamplighter/node.yaml")


def node_config(path: str | None, overrides: list[str], env: Mapping[str, str]) -> NodeConfig:
    """The node config at `path`; else /etc/lamplighter/node.yaml if present; else the defaults (raises ConfigError).

    Only the file and `--set` count: LAMPLIGHTER_SET in the environment is ignored here, because root runs this
    (Slurm's HealthCheckProgram and Prolog); `env` is not given to the loader."""
    if path is None and DEFAULT_NODE_CONFIG.is_file():
        path = str(DEFAULT_NODE_CONFIG)
    if path is None:
        return NodeConfig()
    return load_node(path, overrides)


def local_node_name(cfg: NodeConfig, env: Mapping[str, str], given: str | None = None) -> str:
    return given or env.get("SLURMD_NODENAME") or cfg.node_name or socket.gethostname().split(".")[0]


def gpu_env(node: str, gpusim_root: Path | None, env: Mapping[str, str]) -> dict[str, str]:
    """The GPU workers' environment: this process's, or the node's simulated GPUs under gpusim_root/<node>."""
    if gpusim_root is None:
        return dict(env)
    try:
        from lamplighter.gpusim.build import ensure_built, sim_env
    except ModuleNotFoundError as e:
        raise SystemExit(
            f"--gpusim-root: simulated GPUs are the lab's, in a checkout of lamplighter, not in the wheel ({e})"
        ) from e

    state = gpusim_root / node
    if not state.is_dir():
        raise FileNotFoundError(f"no simulated GPUs for node {node}: {state} does not exist")
    return sim_env(ensure_built().parent.parent, state, dict(env))


def environ() -> dict[str, str]:
    return dict(os.environ)
