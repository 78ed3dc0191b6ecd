"""The probe worker process: `python -m lamplighter.supervisor.gpu.worker_main --index I [--bdf B]`.

Imports amdsmi and calls amdsmi_init once, then answers one JSON line per
"probe" line on stdin, for one GPU. It may block forever inside a driver call
(that is why it is a separate process); the parent kills it at the deadline.
Messages (stdout, one JSON object per line):
    {"type": "ready", "bdf": ..., "count": N, "events": bool}
    {"type": "lost", "message": ...}          the GPU is not enumerated
    {"type": "error", "message": ...}         amdsmi could not start
    {"type": "error", "kind": "amdsmi-install", "message": ...}   amdsmi missing or mismatched (amdsmi_install.py)
    {"type": "reading", ...probe_gpu() dict}
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import io
import json
import signal
import sys
from typing import Any

from lamplighter.supervisor.gpu import amdsmi_install
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
    amdsmi = load(args.module)
    return 1 if amdsmi is None else serve(amdsmi, args.index, args.bdf)


def load(module: str) -> Any:
    """Import amdsmi, or report (kind amdsmi-install) why it is missing or does not match this node's ROCm."""
    printed = io.StringIO()
    try:
        # The package prints its library search failure on stdout: keep it off the message pipe.
        with contextlib.redirect_stdout(printed):
            amdsmi = importlib.import_module(module)
    except Exception as exc:
        facts = amdsmi_install.gather(module, amdsmi_install.installed_version(module))
        msg = amdsmi_install.import_failure(facts, exc, printed.getvalue())
        _send({"type": "error", "kind": "amdsmi-install", "message": msg})
        return None
    version = getattr(amdsmi, "__version__", None)
    facts = amdsmi_install.gather(module, str(version) if version is not None else None)
    location = getattr(sys.modules.get(f"{module}.amdsmi_wrapper"), "location", None)
    problem = amdsmi_install.mismatch(
        amdsmi_install.AmdsmiFacts(**{**facts.__dict__, "library": str(location) if location else None})
    )
    if problem:
        _send({"type": "error", "kind": "amdsmi-install", "message": problem})
        return None
    return amdsmi


if __name__ == "__main__":
    sys.exit(main())
