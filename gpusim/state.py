"""The gpusim state folder: what the simulated GPUs look like right now.

Pointed to by ``LAMPLIGHTER_GPUSIM_DIR``. Layout::

    node                 "gpus=N" and "model=NAME" (key=value lines)
    gpu<i>.state         one GPU's readings, key=value lines (below)
    gpu<i>.events        kfd SMI event queue: lines "<event hex> <message>\\n",
                         appended only (readers keep a byte cursor)
    .lock                flock()ed by writers for read-modify-write

gpu<i>.state keys (unknown keys are ignored by the library):
    bdf, uuid                     identity
    hang=0|1                      1: every call on this GPU blocks until 0
    lost=0|1                      1: calls fail as for a GPU off the bus
    ecc_enabled_mask=0x..         amdsmi_gpu_block_t bits with RAS enabled
    ecc.<block>.ce|ue|de=N        correctable / uncorrectable / deferred counts
    temp.<edge|hotspot|vram>=C    current temperature, degrees C, or "na"
    temp_crit.<sensor>=C          critical limit, degrees C, or "na"
    activity.gfx|umc|mm=PCT       65535 means N/A
    power_w, power_limit_w        watts
    vram_total_mb, vram_used_mb   MiB
    bad_pages, bad_page_threshold retired pages
    xgmi_status=0|1|2             amdsmi_xgmi_status_t
    reset_seq, throttle_count     counters used in event messages
    proc=<pid>:<vram bytes>:<name>   one line per process on the GPU

Every write goes to a temporary file that is renamed over the old one, so the
C library (which re-reads the file on every call) always sees a whole file and
sees an injection at its next call.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ENV_DIR = "LAMPLIGHTER_GPUSIM_DIR"
MAX_GPUS = 64

# amdsmi_gpu_block_t order (bit i), as in csrc/state.c.
BLOCKS = (
    "umc",
    "sdma",
    "gfx",
    "mmhub",
    "athub",
    "pcie_bif",
    "hdp",
    "xgmi_wafl",
    "df",
    "smn",
    "sem",
    "mp0",
    "mp1",
    "fuse",
    "mca",
    "vcn",
    "jpeg",
    "ih",
    "mpio",
)
BLOCK_BITS = {name: 1 << i for i, name in enumerate(BLOCKS)}
# Blocks with RAS/ECC on an MI300X-class part (HBM behind UMC; engines; fabric).
DEFAULT_ECC_BLOCKS = ("umc", "sdma", "gfx", "mmhub", "pcie_bif", "hdp", "xgmi_wafl")
SENSORS = ("edge", "hotspot", "vram")

# Per-node physical layout of an 8-GPU MI300X platform (bus numbers as seen on real boards).
_BUSES = (0x05, 0x26, 0x46, 0x65, 0x85, 0xA6, 0xC6, 0xE5)


class GpusimError(ValueError):
    """Bad use of the state folder: missing folder, GPU out of range, malformed file."""


@dataclass(frozen=True)
class Model:
    name: str
    vram_total_mb: int
    power_limit_w: int
    device_id: int


# MI300X/MI325X report no edge sensor (N/A), only hotspot (junction) and VRAM.
MODELS = {
    "mi300x": Model("MI300X", vram_total_mb=196_592, power_limit_w=750, device_id=0x74A1),
    "mi325x": Model("MI325X", vram_total_mb=262_128, power_limit_w=1000, device_id=0x74A5),
}


@dataclass
class GpuState:
    """One simulated GPU, as stored in gpu<i>.state."""

    index: int
    bdf: str
    uuid: str
    hang: bool = False
    lost: bool = False
    ecc_blocks: tuple[str, ...] = DEFAULT_ECC_BLOCKS
    ecc_ce: dict[str, int] = field(default_factory=dict)
    ecc_ue: dict[str, int] = field(default_factory=dict)
    ecc_de: dict[str, int] = field(default_factory=dict)
    temp: dict[str, int | None] = field(default_factory=lambda: {"edge": None, "hotspot": 42, "vram": 36})
    temp_crit: dict[str, int | None] = field(default_factory=lambda: {"edge": None, "hotspot": 110, "vram": 105})
    activity_gfx: int = 0
    activity_umc: int = 0
    activity_mm: int = 0xFFFF
    power_w: int = 140
    power_limit_w: int = 750
    vram_total_mb: int = 196_592
    vram_used_mb: int = 283
    bad_pages: int = 0
    bad_page_threshold: int = 128
    xgmi_status: int = 0
    reset_seq: int = 0
    throttle_count: int = 0
    procs: list[tuple[int, int, str]] = field(default_factory=list)

    def to_text(self) -> str:
        mask = sum(BLOCK_BITS[b] for b in self.ecc_blocks)
        lines = [
            "# lamplighter gpusim GPU state v1 (see gpusim/README.md)",
            f"bdf={self.bdf}",
            f"uuid={self.uuid}",
            f"hang={int(self.hang)}",
            f"lost={int(self.lost)}",
            f"ecc_enabled_mask={mask:#x}",
        ]
        for block in self.ecc_blocks:
            for kind, counts in (("ce", self.ecc_ce), ("ue", self.ecc_ue), ("de", self.ecc_de)):
                lines.append(f"ecc.{block}.{kind}={counts.get(block, 0)}")
        for sensor in SENSORS:
            lines.append(f"temp.{sensor}={_na(self.temp.get(sensor))}")
            lines.append(f"temp_crit.{sensor}={_na(self.temp_crit.get(sensor))}")
        lines += [
            f"activity.gfx={self.activity_gfx}",
            f"activity.umc={self.activity_umc}",
            f"activity.mm={self.activity_mm}",
            f"power_w={self.power_w}",
            f"power_limit_w={self.power_limit_w}",
            f"vram_total_mb={self.vram_total_mb}",
            f"vram_used_mb={self.vram_used_mb}",
            f"bad_pages={self.bad_pages}",
            f"bad_page_threshold={self.bad_page_threshold}",
            f"xgmi_status={self.xgmi_status}",
            f"reset_seq={self.reset_seq}",
            f"throttle_count={self.throttle_count}",
        ]
        lines += [f"proc={pid}:{vram}:{name}" for pid, vram, name in self.procs]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_text(cls, index: int, text: str, where: str = "") -> GpuState:
        kv: dict[str, str] = {}
        procs: list[tuple[int, int, str]] = []
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise GpusimError(f"{where}:{n}: expected key=value, got {raw!r}")
            key, value = line.split("=", 1)
            if key == "proc":
                pid, vram, name = value.split(":", 2)
                procs.append((int(pid), int(vram), name))
            else:
                kv[key] = value
        try:
            mask = int(kv.get("ecc_enabled_mask", "0"), 0)
            blocks = tuple(b for b in BLOCKS if mask & BLOCK_BITS[b])
            return cls(
                index=index,
                bdf=kv["bdf"],
                uuid=kv["uuid"],
                hang=kv.get("hang", "0") == "1",
                lost=kv.get("lost", "0") == "1",
                ecc_blocks=blocks,
                ecc_ce={b: int(kv.get(f"ecc.{b}.ce", "0")) for b in blocks},
                ecc_ue={b: int(kv.get(f"ecc.{b}.ue", "0")) for b in blocks},
                ecc_de={b: int(kv.get(f"ecc.{b}.de", "0")) for b in blocks},
                temp={s: _from_na(kv.get(f"temp.{s}", "na")) for s in SENSORS},
                temp_crit={s: _from_na(kv.get(f"temp_crit.{s}", "na")) for s in SENSORS},
                activity_gfx=int(kv.get("activity.gfx", "0")),
                activity_umc=int(kv.get("activity.umc", "0")),
                activity_mm=int(kv.get("activity.mm", "65535")),
                power_w=int(kv.get("power_w", "0")),
                power_limit_w=int(kv.get("power_limit_w", "0")),
                vram_total_mb=int(kv.get("vram_total_mb", "0")),
                vram_used_mb=int(kv.get("vram_used_mb", "0")),
                bad_pages=int(kv.get("bad_pages", "0")),
                bad_page_threshold=int(kv.get("bad_page_threshold", "0")),
                xgmi_status=int(kv.get("xgmi_status", "0")),
                reset_seq=int(kv.get("reset_seq", "0")),
                throttle_count=int(kv.get("throttle_count", "0")),
                procs=procs,
            )
        except (KeyError, ValueError) as exc:
            raise GpusimError(f"{where}: malformed GPU state ({exc})") from exc


def _na(value: int | None) -> str:
    return "na" if value is None else str(value)


def _from_na(value: str) -> int | None:
    return None if value == "na" else int(value)


def default_gpu(index: int, model: Model) -> GpuState:
    bus = _BUSES[index] if index < len(_BUSES) else 0x05 + index * 0x20 % 0xFB
    domain = index // len(_BUSES)
    uuid = f"{index:02x}ff{model.device_id:04x}-0000-1000-80{index:02x}-{0x5A17E0000000 + index:012x}"
    return GpuState(
        index=index,
        bdf=f"{domain:04x}:{bus:02x}:00.0",
        uuid=uuid,
        power_limit_w=model.power_limit_w,
        vram_total_mb=model.vram_total_mb,
    )


@dataclass(frozen=True)
class StateDir:
    """A gpusim state folder."""

    root: Path

    @classmethod
    def from_arg(cls, path: str | Path | None) -> StateDir:
        """The folder given, or $LAMPLIGHTER_GPUSIM_DIR; errors say which was missing."""
        chosen = path if path is not None else os.environ.get(ENV_DIR)
        if not chosen:
            raise GpusimError(f"no state folder: pass --dir or set {ENV_DIR}")
        return cls(Path(chosen))

    def node_file(self) -> Path:
        return self.root / "node"

    def gpu_file(self, index: int) -> Path:
        return self.root / f"gpu{index}.state"

    def events_file(self, index: int) -> Path:
        return self.root / f"gpu{index}.events"

    def init(self, gpus: int, model: str = "mi300x") -> None:
        if not 1 <= gpus <= MAX_GPUS:
            raise GpusimError(f"--gpus must be 1..{MAX_GPUS}, got {gpus}")
        if model not in MODELS:
            raise GpusimError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
        self.root.mkdir(parents=True, exist_ok=True)
        with self.locked():
            for i in range(gpus):
                _write_atomic(self.gpu_file(i), default_gpu(i, MODELS[model]).to_text())
                self.events_file(i).touch()
            for stale in self.root.glob("gpu*.state"):
                if int(stale.stem[3:]) >= gpus:
                    stale.unlink()
            _write_atomic(self.node_file(), f"gpus={gpus}\nmodel={MODELS[model].name}\n")

    def gpu_count(self) -> int:
        if not self.root.is_dir():
            raise GpusimError(
                f"state folder {self.root} does not exist (run `lamplighter gpusim init --dir {self.root}`)"
            )
        try:
            text = self.node_file().read_text()
        except FileNotFoundError as exc:
            raise GpusimError(f"{self.root} is not a gpusim state folder (no 'node' file); run gpusim init") from exc
        for line in text.splitlines():
            if line.startswith("gpus="):
                return int(line[5:])
        raise GpusimError(f"{self.node_file()}: no gpus= line")

    def check_gpu(self, index: int) -> None:
        n = self.gpu_count()
        if not 0 <= index < n:
            raise GpusimError(f"GPU {index} is out of range: {self.root} has GPUs 0..{n - 1}")

    def read(self, index: int) -> GpuState:
        self.check_gpu(index)
        path = self.gpu_file(index)
        return GpuState.from_text(index, path.read_text(), where=str(path))

    def write(self, state: GpuState) -> None:
        self.check_gpu(state.index)
        _write_atomic(self.gpu_file(state.index), state.to_text())

    def append_event(self, index: int, event: int, message: str) -> None:
        """Queue one event line; one write() on an O_APPEND fd, so readers see whole lines."""
        if any(c.isspace() for c in message):
            raise GpusimError(f"event message must be one word (the kfd format), got {message!r}")
        fd = os.open(self.events_file(index), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{event:x} {message}\n".encode())
        finally:
            os.close(fd)

    def read_events(self, index: int) -> list[str]:
        try:
            return self.events_file(index).read_text().splitlines()
        except FileNotFoundError:
            return []

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Serialise read-modify-write between injectors (readers need no lock)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def update(self, index: int, change: Callable[[GpuState], None]) -> GpuState:
        """Apply `change(state)` (it edits the state in place) under the lock and write the result."""
        with self.locked():
            state = self.read(index)
            change(state)
            self.write(state)
            return state


# Its own copy of rundir/contract.py's write_text_atomic: gpusim sits below trainer (May import: nothing).
def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
