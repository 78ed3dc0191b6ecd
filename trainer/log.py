"""Line-buffered stderr logging with the `[replica R/rank K - step N]` prefix."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class TrainerLog:
    def __init__(self, replica_id: int, rank: int, stream: TextIO | None = None) -> None:
        self.replica_id = replica_id
        self.rank = rank
        self.step = 0
        self._stream = stream if stream is not None else sys.stderr

    def __call__(self, msg: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        for line in msg.splitlines() or [""]:
            self._stream.write(f"{stamp} [replica {self.replica_id}/rank {self.rank} - step {self.step}] {line}\n")
        self._stream.flush()
