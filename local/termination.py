"""SIGTERM and SIGHUP stop `lamplighter local` as Ctrl-C does.

Python's default for SIGTERM ends the process at once, with no `finally`: the
Lighthouse (its own session) lived on, and the trainers trained on to the
target with nobody watching. systemd, `timeout`, scancel of the sbatch that
runs it and a closed terminal all send one of these two.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM or SIGHUP; caught wherever Ctrl-C is."""


@contextmanager
def interrupt_on_termination() -> Iterator[None]:
    """Within: the first SIGTERM/SIGHUP raises Terminated; later ones are ignored, so the clean-up it
    starts (ending the groups and the Lighthouse, writing the report) is not cut short. Main thread only."""

    def raise_terminated(signum: int, frame: FrameType | None) -> None:
        for s in SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        raise Terminated(signal.Signals(signum).name)

    old = {s: signal.signal(s, raise_terminated) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
