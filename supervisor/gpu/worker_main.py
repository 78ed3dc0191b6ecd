"""The probe worker process: `python -m lamplighter.supervisor.gpu.worker_main --index I [--bdf B]`.

Imports amdsmi and calls amdsmi_init once, then answers one JSON line per
"probe" line on stdin, for one GPU. It may block forever inside a driver call
(that is why it is a separate process); the parent kills it at the deadline.
Messages (stdout, one JSON object per line):
    {"type": "ready", "bdf": ..., "count": N, "events": bool}
    {"type": "lost", "message": ...}          the GPU is not enumerated
    {"type": "error", "message": ...}         amdsmi could not start
    {"type": "reading", ...probe_gpu() dict}
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import signal
import sys
from typing import Any

from lamplighter.supervisor.gpu.probe import find_gpu, open_events, probe_gpu, status_name

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # A worker wedged in a driver call must not outlive the supervisor that would have killed it.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _send(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def serve(amdsmi: Any, index: int, bdf: str | None) -> int:
    try:
        amdsmi.amdsmi_init()
    except amdsmi.AmdSmiException as exc:
        _send({"type": "error", "message": f"amdsmi_init failed: {status_name(exc)}"})
        return 1
    try:
        handle, bdf, count = find_gpu(amdsmi, index, bdf)
    except LookupError as exc:
        _send({"type": "lost", "message": str(exc)})
        return 0
    except amdsmi.AmdSmiException as exc:
        _send({"type": "error", "message": f"enumeration failed: {status_name(exc)}"})
        return 1
    reader = open_events(amdsmi, handle)
    _send({"type": "ready", "bdf": bdf, "count": count, "events": reader is not None})
    for line in sys.stdin:
        if line.strip() != "probe":
            continue
        _send({"type": "reading", **probe_gpu(amdsmi, handle, reader)})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--index", type=int, required=True, help="GPU index in amdsmi enumeration order")
    parser.add_argument("--bdf", default=None, help="GPU identity once known (survives re-enumeration)")
    parser.add_argument("--module", default="amdsmi", help="module to use as amdsmi (tests may give a fake)")
    args = parser.parse_args(argv)
    _die_with_parent()
    try:
        amdsmi = importlib.import_module(args.module)
    except Exception as exc:
        _send({"type": "error", "message": f"import {args.module} failed: {type(exc).__name__}: {exc}"})
        return 1
    return serve(amdsmi, args.index, args.bdf)


if __name__ == "__main__":
    sys.exit(main())
