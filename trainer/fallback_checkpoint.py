"""The durable fallback checkpoint: used only when no live peer can heal a group.

One replica (the quorum's participant 0, group rank 0) copies its state in
memory after a committed step, at most every `interval_s`, and a background
thread writes it with torch.save to a temporary file, fsyncs and renames it,
so the training step only pays for the in-memory copy and a reader never
sees a half-written checkpoint. A snapshot is skipped while the previous
write is still running.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILE_NAME = "fallback.pt"


@dataclass(frozen=True)
class Checkpoint:
    step: int
    batches_committed: int
    user: dict[str, Any]  # model, optim, data: the same shape healing transfers
    state_hash: str
    replica_id: int
    time: float


def checkpoint_path(directory: Path) -> Path:
    return directory / FILE_NAME


def _copy(value: object) -> object:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return value


def load_checkpoint(directory: Path) -> Checkpoint | None:
    """The checkpoint in `directory`, or None if there is none. A corrupt file is an error, never 'none'."""
    import torch

    path = checkpoint_path(directory)
    try:
        with path.open("rb") as f:
            raw = torch.load(f, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        return None
    except Exception as e:
        raise RuntimeError(f"fallback checkpoint {path} is unreadable: {e}") from e
    try:
        return Checkpoint(**raw)
    except TypeError as e:
        raise RuntimeError(f"fallback checkpoint {path} has an unexpected layout: {e}") from e


def write_checkpoint(directory: Path, ck: Checkpoint) -> Path:
    """Write atomically and durably: tmp file, fsync, rename, fsync the directory."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    path = checkpoint_path(directory)
    tmp = directory / f".{FILE_NAME}.{os.getpid()}.tmp"
    try:
        with tmp.open("wb") as f:
            torch.save(ck.__dict__, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return path


class FallbackWriter:
    """Writes snapshots in a background thread; at most one write in flight."""

    def __init__(self, directory: Path, interval_s: float, *, start: float, log: Callable[[str], None]) -> None:
        self._dir = directory
        self._interval = interval_s
        self._last = start  # the first checkpoint comes one interval after start
        self._log = log
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        self.written: list[int] = []  # steps written, for logs and tests

    def due(self, now: float) -> bool:
        busy = self._thread is not None and self._thread.is_alive()
        return not busy and now - self._last >= self._interval

    def submit(
        self,
        now: float,
        *,
        step: int,
        batches_committed: int,
        user: Mapping[str, object],
        state_hash: str,
        replica_id: int,
    ) -> None:
        """Copy the state now (cheap, in the step) and write it in the background."""
        ck = Checkpoint(step, batches_committed, _copy(user), state_hash, replica_id, now)  # type: ignore[arg-type]
        self._last = now
        self._thread = threading.Thread(target=self._write, args=(ck,), name="fallback-checkpoint", daemon=True)
        self._thread.start()

    def _write(self, ck: Checkpoint) -> None:
        try:
            path = write_checkpoint(self._dir, ck)
        except Exception as e:  # a failed write must not kill training; it is logged and retried next interval
            self.last_error = f"writing fallback checkpoint of step {ck.step} to {self._dir}: {e}"
            self._log(self.last_error)
            return
        self.written.append(ck.step)
        self._log(f"fallback checkpoint of step {ck.step} written to {path}")

    def close(self, timeout: float) -> None:
        """Let a write in flight finish (bounded), so a clean exit leaves the newest checkpoint."""
        if self._thread is not None:
            self._thread.join(timeout)
