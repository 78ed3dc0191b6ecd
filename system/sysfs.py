"""The one reader of /sys for the links training uses (or of a fake tree shaped like it), as procfs.py is for /proc.

Every caller passes the sys root, so tests give it a directory with
hand-written files; `ip netns exec` mounts a namespace's own /sys, which is
how a test reads a real veth link in a network namespace.

    /sys/class/net/NAME/operstate          up, down, lowerlayerdown, dormant, notpresent, testing, unknown
    /sys/class/net/NAME/carrier            1 or 0 (unreadable, EINVAL, while the interface is set down)
    /sys/class/net/NAME/carrier_changes    link ups and downs since the driver loaded
    /sys/class/infiniband/DEV/ports/P/state          "4: ACTIVE" (else DOWN, INIT, ARMED, ACTIVE_DEFER)
    /sys/class/infiniband/DEV/ports/P/phys_state     "5: LinkUp" (else Disabled, Polling, ...)
    /sys/class/infiniband/DEV/ports/P/counters/link_downed   times the port's link went down

Nothing here raises for a link that is absent or half readable: the reading says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

SYS = Path("/sys")
LinkKind = Literal["net", "rdma"]


@dataclass(frozen=True)
class LinkReading:
    name: str  # the interface, or DEVICE:PORT
    kind: LinkKind
    present: bool
    up: bool
    state: str  # what sysfs said, for the reason: "down", "lowerlayerdown", "1: DOWN", ...
    changes: int | None  # carrier_changes (net) or link_downed (rdma); None: not readable
    where: str  # the sysfs folder read, for the reason


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # absent, or EINVAL (carrier of an interface set down)
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def read_netdev(sys_root: Path, name: str) -> LinkReading:
    folder = sys_root / "class" / "net" / name
    operstate = _read(folder / "operstate")
    if operstate is None:
        return LinkReading(name, "net", False, False, "missing", None, str(folder))
    carrier = _read(folder / "carrier")
    # "unknown": the driver reports no operstate (some virtual and older drivers); then the carrier decides.
    up = operstate == "up" or (operstate == "unknown" and carrier == "1")
    return LinkReading(name, "net", True, up, operstate, _int(folder / "carrier_changes"), str(folder))


def rdma_ports(sys_root: Path, spec: str) -> list[str]:
    """DEVICE:PORT for each port `spec` names (DEVICE alone: every port it has, in order)."""
    device, _, port = spec.partition(":")
    if port:
        return [spec]
    try:
        found = sorted((p.name for p in (sys_root / "class" / "infiniband" / device / "ports").iterdir()), key=_num)
    except OSError:
        return [f"{device}:1"]  # absent: reported as its first port missing
    return [f"{device}:{p}" for p in found] or [f"{device}:1"]


def _num(text: str) -> tuple[int, str]:
    return (int(text), "") if text.isdigit() else (1 << 30, text)


def read_rdma_port(sys_root: Path, device_port: str) -> LinkReading:
    device, _, port = device_port.partition(":")
    folder = sys_root / "class" / "infiniband" / device / "ports" / (port or "1")
    state = _read(folder / "state")
    if state is None:
        return LinkReading(device_port, "rdma", False, False, "missing", None, str(folder))
    phys = _read(folder / "phys_state")
    up = state.split(":")[-1].strip().upper() == "ACTIVE"
    said = state if phys is None or up else f"{state}, {phys}"
    return LinkReading(device_port, "rdma", True, up, said, _int(folder / "counters" / "link_downed"), str(folder))


def read_links(sys_root: Path, interfaces: list[str], rdma: list[str]) -> list[LinkReading]:
    """Every named link, in the order given (RDMA devices expanded to their ports)."""
    out = [read_netdev(sys_root, n) for n in interfaces]
    for spec in rdma:
        out += [read_rdma_port(sys_root, p) for p in rdma_ports(sys_root, spec)]
    return out
