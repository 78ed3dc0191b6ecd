"""The processes of bench/heal_bandwidth.py: a live peer serving its state, a fresh peer healing from it.

Each runs in its own spawned interpreter and talks to the driver over a multiprocessing Pipe
(dict messages). The transports are used the way torchft's Manager uses them: the live peer calls
``send_checkpoint(dst_ranks, step, state_dict, timeout)``, the healing peer calls
``recv_checkpoint(src_rank, metadata, step, timeout)`` with the live peer's ``metadata()``, and the
live peer calls ``disallow_checkpoint()`` before it would mutate its state again.

Transports (names of the --transports option):
  http        the reference trainer's: torchft's HTTPTransport server, received by lamplighter's weights-only
              loader straight into the healing peer's own tensors (lamplighter/trainer/heal_stream.py)
  http-torchft  torchft's HTTPTransport on both sides, num_chunks=0 (the Manager's default)
  http-cN     torchft's HTTPTransport(num_chunks=N): N parallel HTTP GETs, one per slice of the tensors
  pg          torchft PGTransport over a torchft ProcessGroupGloo (lamplighter's checkpoint_transport: pg)
  pg-inplace  PGTransport(state_dict=...): received straight into the healing peer's own tensors (the
              reference trainer with transport pg, which creates its optimizer state when it starts)
  pg-inplace-model  the same, but only the weights exist beforehand (an optimizer that creates its state lazily)
  tcp         no torchft: the raw tensor bytes over one loopback TCP socket, read into the receiver's own
              resident tensors (the wire's limit here)
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import resource
import socket
import struct
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

MB = 1_000_000
LOG_ENV = "HEAL_BENCH_LOG"  # the driver names a file for the peers' stderr
STEP = 7  # the step the live peer serves; recv_checkpoint checks it
SRC_RANK, DST_RANK = 0, 1


def quiet() -> None:
    """Peers' stderr (torchft's HTTP server logs every GET, torch warns per process) goes to a log
    file, so that the driver's progress lines stay readable; errors come back over the pipe."""
    warnings.simplefilter("ignore")
    path = os.environ.get(LOG_ENV)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def maxrss_mb() -> float:
    """Peak resident set of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / MB


def layout(nbytes: int, chunk_bytes: int) -> tuple[int, int]:
    """(parameters, float32 elements per tensor): weights + AdamW's exp_avg and exp_avg_sq, a third each,
    split into tensors of about chunk_bytes (a model is many tensors, not one)."""
    per_kind = nbytes / 3
    n_params = max(1, round(per_kind / chunk_bytes))
    return n_params, max(1, int(per_kind // (n_params * 4)))


def build_state(nbytes: int, chunk_bytes: int, seed: int, fill: str = "random") -> dict[str, Any]:
    """What the Manager sends: {"user": the trainer's state dicts, "torchft": the Manager's own}.
    fill: random (what verification needs), zeros (an in-place target), ones (only speed matters)."""
    import torch

    n_params, numel = layout(nbytes, chunk_bytes)
    gen = torch.Generator().manual_seed(seed)

    def tensor() -> torch.Tensor:
        if fill == "random":
            return torch.randn(numel, generator=gen)
        # fill_ touches every page: a trainer's tensors are resident, not fresh zero pages.
        return torch.empty(numel).fill_(0.0 if fill == "zeros" else 1.0)

    model = {f"layers.{i}.weight": tensor() for i in range(n_params)}
    optim_state = {
        i: {"step": torch.tensor(float(STEP)), "exp_avg": tensor(), "exp_avg_sq": tensor()} for i in range(n_params)
    }
    groups = [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, "params": list(range(n_params))}]
    # Nested as the reference trainer's TrainState.state_dict() under Manager(state_dict=...) ("default").
    user = {
        "model": model,
        "optim": {"state": optim_state, "param_groups": groups},
        "data": {"cursor": 64 * STEP},
        "sender": {"replica_id": 0},
    }
    return {"user": {"default": user}, "torchft": {"step": STEP, "batches_committed": 2 * STEP}}


def tensor_bytes(t: torch.Tensor) -> memoryview:
    import torch

    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().data


def state_bytes(state: object) -> tuple[int, int]:
    """(bytes of all tensors, number of tensors)."""
    import torch
    from torch.utils._pytree import tree_flatten

    tensors = [v for v in tree_flatten(state)[0] if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors), len(tensors)


def digest(state: object) -> str:
    """A hash of the whole state: every leaf's path, and each tensor's dtype, shape and bytes.
    sha1 per tensor on 2 threads (hashlib drops the GIL): sha256 alone is ~0.6 GB/s here."""
    import torch
    from torch.utils._pytree import keystr, tree_flatten_with_path

    leaves = tree_flatten_with_path(state)[0]
    tensors = [v for _, v in leaves if isinstance(v, torch.Tensor)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        sums = iter(list(pool.map(lambda t: hashlib.sha1(tensor_bytes(t)).hexdigest(), tensors)))
    h = hashlib.sha256()
    for path, v in leaves:
        if isinstance(v, torch.Tensor):
            h.update(f"{keystr(path)}|{v.dtype}|{tuple(v.shape)}|{next(sums)}\n".encode())
        else:
            h.update(f"{keystr(path)}|{v!r}\n".encode())
    return h.hexdigest()


class _TimedIO:
    """A file proxy that adds up the time spent in the socket's read/write calls: the rest of a
    _streaming_save/_streaming_load is (de)serialisation."""

    def __init__(self, f: Any, stats: dict[str, float]) -> None:
        self._f, self._stats = f, stats

    def _timed(self, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self._stats["io_s"] = self._stats.get("io_s", 0.0) + time.perf_counter() - t0
            self._stats["io_calls"] = self._stats.get("io_calls", 0.0) + 1

    def read(self, *args: Any) -> Any:
        return self._timed(self._f.read, *args)

    def readline(self, *args: Any) -> Any:
        return self._timed(self._f.readline, *args)

    def readinto(self, *args: Any) -> Any:
        return self._timed(self._f.readinto, *args)

    def write(self, *args: Any) -> Any:
        return self._timed(self._f.write, *args)

    def flush(self) -> None:
        self._f.flush()


def _instrument_http(stats: dict[str, float]) -> None:
    """Wrap HTTPTransport's (de)serialisers to split its time into socket I/O and the rest (a few
    perf_counter calls per tensor: negligible). Summed over threads when num_chunks > 0."""
    from torchft.checkpointing import http_transport as ht

    save, load = ht._streaming_save, ht._streaming_load

    def timed_save(obj: object, f: Any) -> None:
        t0 = time.perf_counter()
        save(obj, _TimedIO(f, stats))
        stats["total_s"] = stats.get("total_s", 0.0) + time.perf_counter() - t0

    def timed_load(f: Any, weights_only: bool = True) -> object:
        t0 = time.perf_counter()
        out = load(_TimedIO(f, stats), weights_only=weights_only)
        stats["total_s"] = stats.get("total_s", 0.0) + time.perf_counter() - t0
        return out

    ht._streaming_save, ht._streaming_load = timed_save, timed_load
    # lamplighter's weights-only loader (transport http) takes load_into from its module at each call.
    from lamplighter.trainer import heal_transport as lt

    into = lt.load_into

    def timed_into(f: Any, dest: object | None, what: str) -> object:
        t0 = time.perf_counter()
        out = into(_TimedIO(f, stats), dest, what)
        stats["total_s"] = stats.get("total_s", 0.0) + time.perf_counter() - t0
        return out

    setattr(lt, "load_into", timed_into)  # noqa: B010 (a module's function replaced for the measurement)


def _transport_kind(name: str) -> tuple[str, int]:
    if name.startswith("http-c"):
        return "http", int(name.removeprefix("http-c"))
    return ("http", 0) if name == "http-torchft" else (name, 0)


def _new_pg(timeout: timedelta) -> Any:
    from torchft.process_group import ProcessGroupGloo

    return ProcessGroupGloo(timeout=timeout)


def _pg_join(pg: Any, store_port: int, rendezvous: int, rank: int, timeout: timedelta) -> None:
    """Both peers rendezvous on a fresh store prefix per transfer, as the Manager's reconfigure does per
    quorum (a reused prefix can hand one peer the previous receiver's handle: a hang)."""
    from torchft.process_group import reconfigure_with_store

    reconfigure_with_store(pg, f"127.0.0.1:{store_port}/heal/{rendezvous}", rank, 2, timeout)


def _tcp_send(conn: Connection, state: object) -> dict[str, float]:
    import torch
    from torch.utils._pytree import tree_flatten

    leaves, spec = tree_flatten(state)
    meta = [("t", v.dtype, tuple(v.shape)) if isinstance(v, torch.Tensor) else ("v", v) for v in leaves]
    header = pickle.dumps((spec, meta))
    with socket.create_server(("127.0.0.1", 0)) as srv:
        conn.send({"offered": True, "port": srv.getsockname()[1]})
        s, _ = srv.accept()
        with s:
            t0 = time.perf_counter()
            s.sendall(struct.pack("!Q", len(header)) + header)
            for v in leaves:
                if isinstance(v, torch.Tensor):
                    s.sendall(tensor_bytes(v))
            s.shutdown(socket.SHUT_WR)
            s.recv(1)  # the receiver closes once it has everything
            return {"send_s": time.perf_counter() - t0}


def _recv_exact(s: socket.socket, buf: memoryview) -> None:
    off = 0
    while off < len(buf):
        n = s.recv_into(buf[off:])
        if n == 0:
            raise ConnectionError(f"peer closed after {off} of {len(buf)} bytes")
        off += n


def _tcp_recv(port: int, into: object) -> object:
    """The sender's tensors, each read straight into the receiver's own resident tensor of `into` (same layout):
    the wire's limit, with no allocation and no serialisation."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    own = iter([v for v in tree_flatten(into)[0] if isinstance(v, torch.Tensor)])
    with socket.create_connection(("127.0.0.1", port)) as s:
        n = bytearray(8)
        _recv_exact(s, memoryview(n))
        header = bytearray(struct.unpack("!Q", n)[0])
        _recv_exact(s, memoryview(header))
        spec, meta = pickle.loads(header)
        values: list[object] = []
        for m in meta:
            if m[0] == "t":
                t = next(own)
                assert t.dtype == m[1] and tuple(t.shape) == m[2], (t.dtype, t.shape, m)
                _recv_exact(s, tensor_bytes(t).cast("B"))
                values.append(t)
            else:
                values.append(m[1])
        return tree_unflatten(values, spec)


def sender_main(conn: Connection, transport: str, nbytes: int, chunk_bytes: int, seed: int, timeout_s: float) -> None:
    """The live peer: builds its state once, then serves one healing peer per 'offer'."""
    quiet()
    try:
        _sender(conn, transport, nbytes, chunk_bytes, seed, timedelta(seconds=timeout_s))
    except BaseException as e:
        conn.send({"error": f"{type(e).__name__}: {e}"})
        raise


def _sender(conn: Connection, transport: str, nbytes: int, chunk_bytes: int, seed: int, timeout: timedelta) -> None:
    import torch.distributed as dist

    rss_idle = rss_mb()
    t0 = time.perf_counter()
    state = build_state(nbytes, chunk_bytes, seed)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    want = digest(state)
    digest_s = time.perf_counter() - t0
    kind, chunks = _transport_kind(transport)
    stats: dict[str, float] = {}
    ready: dict[str, Any] = {"digest": want, "build_s": build_s, "digest_s": digest_s, "rss_idle_mb": rss_idle}
    ready["state_bytes"], ready["n_tensors"] = state_bytes(state)
    store = pg = tp = None
    if kind == "http":
        from torchft.checkpointing.http_transport import HTTPTransport

        _instrument_http(stats)
        tp = HTTPTransport(timeout=timeout, num_chunks=chunks)
    elif kind.startswith("pg"):
        from torchft.checkpointing.pg_transport import PGTransport

        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timeout)
        ready["store_port"] = store.port
        pg = _new_pg(timeout)
        tp = PGTransport(pg, timeout=timeout, device=torch_cpu())
    conn.send({"ready": True, **ready})
    while True:
        msg = conn.recv()
        if msg["cmd"] == "exit":
            if tp is not None:
                tp.shutdown(wait=False)
            conn.send({"exited": True, "maxrss_mb": maxrss_mb()})
            return
        assert msg["cmd"] == "offer", msg
        stats.clear()
        if kind == "http":
            assert tp is not None
            t0 = time.perf_counter()
            tp.send_checkpoint(dst_ranks=[DST_RANK], step=STEP, state_dict=state, timeout=timeout)
            conn.send({"offered": True, "metadata": tp.metadata(), "stage_s": time.perf_counter() - t0})
            assert conn.recv()["cmd"] == "release"
            tp.disallow_checkpoint()  # waits for in-flight GETs, as at the Manager's next commit
            conn.send({"done": True, "sender_split": dict(stats), "rss_mb": rss_mb()})
        elif kind.startswith("pg"):
            assert tp is not None and store is not None
            conn.send({"offered": True})
            _pg_join(pg, store.port, msg["rendezvous"], SRC_RANK, timeout)
            t0 = time.perf_counter()
            tp.send_checkpoint(dst_ranks=[DST_RANK], step=STEP, state_dict=state, timeout=timeout)
            conn.send({"done": True, "send_s": time.perf_counter() - t0, "rss_mb": rss_mb()})
        elif kind == "tcp":
            conn.send({"done": True, **_tcp_send(conn, state), "rss_mb": rss_mb()})
        else:
            raise ValueError(f"unknown transport {transport!r}")


def torch_cpu() -> torch.device:
    import torch

    return torch.device("cpu")


def receiver_main(conn: Connection, transport: str, nbytes: int, chunk_bytes: int, timeout_s: float) -> None:
    """A fresh healing peer: one recv_checkpoint, then the hash of what arrived."""
    quiet()
    try:
        _receiver(conn, transport, nbytes, chunk_bytes, timedelta(seconds=timeout_s))
    except BaseException as e:
        conn.send({"error": f"{type(e).__name__}: {e}"})
        raise


def _receiver(conn: Connection, transport: str, nbytes: int, chunk_bytes: int, timeout: timedelta) -> None:
    import torch  # noqa: F401  # imported before the clock starts, for every transport

    kind, chunks = _transport_kind(transport)
    stats: dict[str, float] = {}
    tp: Any = None
    pg = None
    own: dict[str, Any] | None = None
    if kind == "http" and chunks == 0 and transport != "http-torchft":
        from lamplighter.trainer.heal_transport import weights_only_http_transport

        _instrument_http(stats)
        # The reference trainer's receiving side, into the state a restarted trainer has built.
        own = build_state(nbytes, chunk_bytes, seed=0, fill="zeros")
        tp = weights_only_http_transport(timeout, receive_into=lambda: own)
    elif kind == "http":
        from torchft.checkpointing.http_transport import HTTPTransport

        _instrument_http(stats)
        tp = HTTPTransport(timeout=timeout, num_chunks=chunks)
    if kind == "tcp":
        own = build_state(nbytes, chunk_bytes, seed=0, fill="zeros")  # resident, as a trainer's own state is
    elif kind.startswith("pg"):
        from torchft.checkpointing.pg_transport import PGTransport

        if kind.startswith("pg-inplace"):
            # A restarted trainer has built its model (and, if it materialised it, its optimizer state).
            own = build_state(nbytes, chunk_bytes, seed=0, fill="zeros")
            if kind == "pg-inplace-model":
                own["user"]["default"]["optim"]["state"] = {}  # torch optimizers create state at step 1
        pg = _new_pg(timeout)
        tp = PGTransport(pg, timeout=timeout, device=torch_cpu(), state_dict=(lambda: own) if own else None)
    rss_ready = rss_mb()
    conn.send({"ready": True, "rss_ready_mb": rss_ready})
    go = conn.recv()
    if kind.startswith("pg"):
        _pg_join(pg, go["store_port"], go["rendezvous"], DST_RANK, timeout)
    t0 = time.perf_counter()
    if kind == "tcp":
        got = _tcp_recv(go["port"], own)
    else:
        got = tp.recv_checkpoint(src_rank=SRC_RANK, metadata=go.get("metadata", "<n/a>"), step=STEP, timeout=timeout)
    recv_s = time.perf_counter() - t0
    rss_after = rss_mb()
    t0 = time.perf_counter()
    have = digest(got)
    result = {
        "recv_s": recv_s,
        "digest": have,
        "digest_s": time.perf_counter() - t0,
        "state_bytes": state_bytes(got)[0],
        "rss_ready_mb": rss_ready,
        "rss_after_mb": rss_after,
        "maxrss_mb": maxrss_mb(),
        "receiver_split": dict(stats),
    }
    if tp is not None:
        tp.shutdown(wait=False)
    conn.send(result)


def memcpy_main(conn: Connection, nbytes: int, chunk_bytes: int, reps: int) -> None:
    """The limit: this machine's memory-copy bandwidth on the same tensor layout.
    copy: into resident destination tensors (pure bandwidth); clone: into fresh ones (adds page faults,
    as a fresh healing process pays)."""
    quiet()
    import torch
    from torch.utils._pytree import tree_flatten

    src = [v for v in tree_flatten(build_state(nbytes, chunk_bytes, 0, fill="ones"))[0] if isinstance(v, torch.Tensor)]
    dst = [torch.empty_like(t).fill_(0.0) for t in src]
    total = sum(t.numel() * t.element_size() for t in src)
    copy, clone = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        for d, s in zip(dst, src, strict=True):
            d.copy_(s)
        copy.append(time.perf_counter() - t0)
    del dst
    for _ in range(reps):
        t0 = time.perf_counter()
        fresh = [t.clone() for t in src]
        clone.append(time.perf_counter() - t0)
        del fresh
    conn.send({"bytes": total, "copy_s": copy, "clone_s": clone, "threads": torch.get_num_threads()})


def profile_main(conn: Connection, nbytes: int, chunk_bytes: int) -> None:
    """HTTPTransport's serialisation without a network: _streaming_save into a null sink and into memory,
    _streaming_load back from memory. Needs ~3x the state in memory, so the driver caps the size."""
    quiet()
    from torchft.checkpointing._serialization import _streaming_load, _streaming_save

    state = build_state(nbytes, chunk_bytes, 0, fill="ones")

    class Null(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b: Any) -> int:
            return len(memoryview(b))

    t0 = time.perf_counter()
    _streaming_save(state, Null())
    save_null_s = time.perf_counter() - t0
    buf = io.BytesIO()
    t0 = time.perf_counter()
    _streaming_save(state, buf)
    save_mem_s = time.perf_counter() - t0
    del state
    buf.seek(0)
    t0 = time.perf_counter()
    _streaming_load(buf, weights_only=False)
    load_mem_s = time.perf_counter() - t0
    conn.send({"save_null_s": save_null_s, "save_mem_s": save_mem_s, "load_mem_s": load_mem_s, "bytes": buf.tell()})
