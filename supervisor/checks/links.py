"""Link check: the network and RDMA links training uses, missing, down or flapping.

`judge_links` is the decision, a pure function of (now, readings, history,
config); `LinkCheck` keeps the history between cycles and asks a `LinkReader`
(sysfs, or anything shaped like it) for the readings.

Flapping is counted on the kernel's own counter of link changes
(carrier_changes; link_downed for an RDMA port), so changes between two
cycles are never missed: more than `flap_max_changes` within `flap_window_s`
is a fault, even while the link happens to be up. A counter that went back
(the driver reloaded) starts the count again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lamplighter.configs.schema import NetworkConfig
from lamplighter.policy.observations import LinkFault
from lamplighter.system.sysfs import SYS, LinkReading, read_links

Sample = tuple[float, str, int]  # (time, link, its change counter)


class LinkReader(Protocol):
    def read(self) -> list[LinkReading]: ...


@dataclass(frozen=True)
class SysfsLinks:
    """The configured links, read from a sys root (/sys, or a test's tree)."""

    interfaces: tuple[str, ...]
    rdma: tuple[str, ...]
    sys_root: Path = SYS

    def read(self) -> list[LinkReading]:
        return read_links(self.sys_root, list(self.interfaces), list(self.rdma))


def judge_links(
    now: float, readings: Sequence[LinkReading], history: tuple[Sample, ...], cfg: NetworkConfig
) -> tuple[list[LinkFault], tuple[Sample, ...]]:
    """The faults in these readings, and the history to keep (change counters within the window)."""
    faults: list[LinkFault] = []
    kept = [s for s in history if now - s[0] <= cfg.flap_window_s]
    for r in readings:
        if not r.present:
            faults.append(LinkFault(r.name, "link-missing", f"not found ({r.where} does not exist)"))
            kept = [s for s in kept if s[1] != r.name]
            continue
        if r.changes is not None:
            mine = [s for s in kept if s[1] == r.name]
            if mine and r.changes < mine[-1][2]:  # the counter went back: a driver reload
                kept = [s for s in kept if s[1] != r.name]
                mine = []
            kept.append((now, r.name, r.changes))
            changes = r.changes - mine[0][2] if mine else 0
            if changes > cfg.flap_max_changes:
                span = now - mine[0][0]
                faults.append(
                    LinkFault(
                        r.name,
                        "link-flapping",
                        f"flapping: {changes} link changes in {span:.0f} s (network.flap_max_changes "
                        f"{cfg.flap_max_changes} within {cfg.flap_window_s:g} s; now {'up' if r.up else r.state})",
                    )
                )
                continue
        if not r.up:
            faults.append(LinkFault(r.name, "link-down", f"down ({r.state}, {r.where})"))
    return faults, tuple(kept)


class LinkCheck:
    def __init__(self, reader: LinkReader, cfg: NetworkConfig) -> None:
        self._reader = reader
        self._cfg = cfg
        self._history: tuple[Sample, ...] = ()

    def observe(self, now: float) -> list[LinkFault]:
        faults, self._history = judge_links(now, self._reader.read(), self._history, self._cfg)
        return faults
