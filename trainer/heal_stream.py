"""A peer's state in torch's streaming format, read weights-only, each tensor straight into the healing
trainer's own tensor where one matches it.

torchft's HTTP transport serves the Manager's state dict with torch.distributed._serialization's
`_streaming_save`: a pickle of entries (key, is_storage, length), then each record's bytes in that
order: `data.pkl` (the object, naming its storages by key) and a few small records, then one record
per storage. torch's reader reads a storage into a new bytes object and copies it into a new tensor,
and the trainer then copies that into its own: fresh memory for the whole state, twice. On this
machine the first touch of fresh pages, not the socket, bounds a heal at 1-4 GB: the same HTTP
stream read into memory already touched runs about 3x faster (bench/results/heal_bandwidth.json).

So `load_into` reads `data.pkl` first with only the storages' shapes (meta tensors), pairs each
tensor the peer sends with the trainer's tensor at the same place in `dest` (same dtype, shape, the
whole of both storages, one tensor per storage), and reads that storage's bytes into the trainer's
tensor; any other storage gets memory of its own. The object is then built again over the real
storages: the tensors the trainer gets back share memory with its own, so its load_state_dict copies
nothing. Every pickle here is read by torch's weights-only unpickler. A heal that fails part-way has
written part of the trainer's tensors; the trainer is behind its peers (that is why it heals), never
commits such a step, and the next quorum heals it again.
"""

from __future__ import annotations

import ctypes
import io
import sys
from typing import Any

DATA_PKL = "data.pkl"
MAX_SMALL_RECORD = 64 << 20  # data.pkl and the format's few small records; a storage has no such bound


class HealStreamError(RuntimeError):
    """The peer's stream is not what torch's streaming format holds, or it ended early; names what."""


def writable_bytes(t: Any) -> memoryview:
    """The bytes of a contiguous CPU tensor, to read into (torch tensors do not export a buffer)."""
    n = t.numel() * t.element_size()
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B")


def read_exactly(f: Any, into: memoryview, what: str) -> None:
    got = 0
    while got < len(into):
        n = f.readinto(into[got:])
        if not n:
            raise HealStreamError(f"{what}: the peer's stream ended after {got} of {len(into)} bytes")
        got += n


def _storage_id(pid: Any, lengths: dict[str, int], what: str) -> tuple[str, Any, int]:
    """(record key, dtype, bytes) of a persistent id ('storage', storage type, key, location, numel)."""
    import torch

    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] in ("storage", b"storage")):
        raise HealStreamError(f"{what}: a persistent id that is not a storage's")
    _, storage_type, key, _location, numel = pid
    dtype = torch.uint8 if storage_type is torch.UntypedStorage else storage_type.dtype
    name = f"data/{key}"
    nbytes = int(numel) * torch._utils._element_size(dtype)
    if lengths.get(name) != nbytes:
        raise HealStreamError(f"{what}: storage {key} holds {lengths.get(name)} bytes, its tensor names {nbytes}")
    return name, dtype, nbytes


def _unpickle(pkl: bytes, storage: Any, lengths: dict[str, int], what: str) -> object:
    """data.pkl through the weights-only unpickler, each storage from `storage(name, dtype, nbytes)`."""
    import torch
    import torch._weights_only_unpickler as weights_only

    typed: dict[str, Any] = {}

    def persistent_load(pid: Any) -> Any:
        name, dtype, nbytes = _storage_id(pid, lengths, what)
        if name not in typed:  # several tensors may view one storage: give them the same one
            typed[name] = torch.storage.TypedStorage(wrap_storage=storage(name, nbytes), dtype=dtype, _internal=True)
        return typed[name]

    unpickler = weights_only.Unpickler(io.BytesIO(pkl), encoding="utf-8")
    unpickler.persistent_load = persistent_load  # type: ignore[method-assign]
    return unpickler.load()


def _tensors(obj: object, out: list[Any]) -> list[Any]:
    import torch

    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensors(v, out)
    elif isinstance(obj, list | tuple):
        for v in obj:
            _tensors(v, out)
    return out


def _pairs(got: object, dest: object, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """(peer's tensor, trainer's tensor) at the same place in both objects."""
    import torch

    if isinstance(got, torch.Tensor) and isinstance(dest, torch.Tensor):
        out.append((got, dest))
    elif isinstance(got, dict) and isinstance(dest, dict):
        for k, v in got.items():
            if k in dest:
                _pairs(v, dest[k], out)
    elif isinstance(got, list | tuple) and isinstance(dest, list | tuple) and len(got) == len(dest):
        for a, b in zip(got, dest, strict=True):
            _pairs(a, b, out)
    return out


def _whole(t: Any, nbytes: int) -> bool:
    """`t` is the whole of its storage, in order: the storage's bytes are the tensor's."""
    return t.storage_offset() == 0 and t.is_contiguous() and t.untyped_storage().nbytes() == nbytes


def targets(shapes: object, dest: object, names: dict[int, str], lengths: dict[str, int]) -> dict[str, Any]:
    """Storage record -> the trainer's tensor its bytes may be read into. `shapes`: the peer's object over
    meta storages; `names`: each meta storage's address (`_cdata`) -> its record."""
    uses: dict[str, int] = {}
    for t in _tensors(shapes, []):
        name = names[t.untyped_storage()._cdata]
        uses[name] = uses.get(name, 0) + 1
    out: dict[str, Any] = {}
    taken: set[int] = set()
    for got, mine in _pairs(shapes, dest, []):
        name = names[got.untyped_storage()._cdata]
        nbytes = lengths[name]
        if (
            uses[name] == 1
            and mine.device.type == "cpu"
            and got.dtype == mine.dtype
            and got.shape == mine.shape
            and _whole(got, nbytes)
            and _whole(mine, nbytes)
            and mine.untyped_storage()._cdata not in taken
        ):
            out[name] = mine
            taken.add(mine.untyped_storage()._cdata)
    return out


def load_into(f: Any, dest: object | None, what: str) -> object:
    """The peer's object from stream `f`, its tensors in `dest`'s where they match (see the module)."""
    import torch
    import torch._weights_only_unpickler as weights_only

    try:
        entries = weights_only.load(f, encoding="utf-8")
    except Exception as err:  # the unpickler's own errors name what it refused
        raise HealStreamError(f"{what}: unreadable header: {err}") from err
    if not isinstance(entries, list):
        raise HealStreamError(f"{what}: the header is not a list of records")
    small: dict[str, bytes] = {}
    lengths: dict[str, int] = {}
    storages = []
    for rec in entries:
        if rec.is_storage:
            lengths[rec.key] = int(rec.length)
            storages.append(rec)
        elif storages:
            raise HealStreamError(f"{what}: record {rec.key!r} after the storages (not torch's streaming format)")
        elif not 0 <= rec.length <= MAX_SMALL_RECORD:
            raise HealStreamError(f"{what}: record {rec.key!r} of {rec.length} bytes")
        else:
            buf = bytearray(rec.length)
            read_exactly(f, memoryview(buf), f"{what}, {rec.key}")
            small[rec.key] = bytes(buf)
    if DATA_PKL not in small:
        raise HealStreamError(f"{what}: no {DATA_PKL} record")
    if small.get("byteorder", b"little") != sys.byteorder.encode():
        raise HealStreamError(
            f"{what}: the peer's byte order is {small['byteorder']!r}, this machine's {sys.byteorder}"
        )

    meta: dict[str, Any] = {}

    def meta_storage(name: str, nbytes: int) -> Any:
        meta[name] = torch.UntypedStorage(nbytes, device="meta")
        return meta[name]

    shapes = _unpickle(small[DATA_PKL], meta_storage, lengths, what)
    names = {s._cdata: name for name, s in meta.items()}
    into = targets(shapes, dest, names, lengths) if dest is not None else {}

    real: dict[str, Any] = {}
    for rec in storages:
        t = into.get(rec.key)
        if t is None:
            t = torch.empty(rec.length, dtype=torch.uint8)
        if rec.length:
            read_exactly(f, writable_bytes(t), f"{what}, {rec.key}")
        real[rec.key] = t.untyped_storage()
    return _unpickle(small[DATA_PKL], lambda name, nbytes: real[name], lengths, what)
