"""Run torchft's Lighthouse without importing torch: `python -m lamplighter.supervisor.lighthouse_main ARGS`.

The `torchft_lighthouse` script imports the `torchft` package, whose
__init__ imports torch: 1.5 s to start on an idle machine and 6 s measured on
a busy one, during which no group can take a quorum. The Lighthouse itself
lives in the Rust extension `torchft._torchft`, which needs nothing from
torch, so this loads that one file directly and starts in about 0.1 s.
It takes torchft_lighthouse's flags and runs the same server class
(`LighthouseServer`, what lighthouse_main runs) until it is killed.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import signal
import sys
from collections.abc import Sequence
from pathlib import Path


def find_extension() -> Path:
    """torchft/_torchft*.so in the installed torchft, located without importing torchft."""
    spec = importlib.util.find_spec("torchft")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("torchft is not installed in this environment")
    for folder in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            cand = Path(folder) / f"_torchft{suffix}"
            if cand.exists():
                return cand
    raise ImportError(f"no torchft._torchft extension in {list(spec.submodule_search_locations)}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lighthouse_main", description="torchft's Lighthouse, started without torch")
    ap.add_argument("--bind", required=True)
    ap.add_argument("--min_replicas", type=int, required=True)
    ap.add_argument("--join_timeout_ms", type=int, default=None)
    ap.add_argument("--quorum_tick_ms", type=int, default=None)
    ap.add_argument("--heartbeat_timeout_ms", type=int, default=None)
    args = ap.parse_args(argv)
    path = find_extension()
    spec = importlib.util.spec_from_file_location("torchft._torchft", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = module.LighthouseServer(
        bind=args.bind,
        min_replicas=args.min_replicas,
        join_timeout_ms=args.join_timeout_ms,
        quorum_tick_ms=args.quorum_tick_ms,
        heartbeat_timeout_ms=args.heartbeat_timeout_ms,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while server is not None:  # it serves on torchft's own threads while referenced, until this process is killed
        signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
