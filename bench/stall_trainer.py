"""The reference trainer with torchft's recovery steps timed: `python -m bench.stall_trainer --config PATH`.

For bench/stall_groups.py: where a survivor's stall goes when a peer fails. It wraps torchft's Manager
(never changes what it does) and appends one JSON line per event to <run_dir>/timing/<group>-<pid>.jsonl:
  lh_start, lh_done      the Lighthouse quorum request (ManagerClient._quorum) and its answer
  pg_start, pg_done      the process group's reconfiguration for a new quorum (all members connect)
  error                  the Manager was told of an error (a collective that failed, a heal that failed)
  commit_start, commit_done   should_commit (the vote that ends every step)
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from lamplighter.rundir.contract import ENV_REPLICA_ID, ENV_RUN_DIR


class Events:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
        self._lock = threading.Lock()

    def __call__(self, name: str, **extra: Any) -> None:
        line = json.dumps({"e": name, "t": time.time(), **extra})
        with self._lock:
            self._f.write(line + "\n")


class TimedClient:
    """torchft's ManagerClient, its quorum and commit calls timed."""

    def __init__(self, client: Any, events: Events) -> None:
        self._client, self._events = client, events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _quorum(self, *args: Any, **kwargs: Any) -> Any:
        self._events("lh_start")
        try:
            return self._client._quorum(*args, **kwargs)
        finally:
            self._events("lh_done")

    def should_commit(self, *args: Any, **kwargs: Any) -> Any:
        self._events("commit_start")
        try:
            return self._client.should_commit(*args, **kwargs)
        finally:
            self._events("commit_done")


def instrument(events: Events) -> None:
    from torchft.manager import Manager

    init, reconfigure, report = Manager.__init__, Manager._reconfigure_pg, Manager.report_error

    def timed_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._client = TimedClient(self._client, events)

    def timed_reconfigure(self: Any, *args: Any, **kwargs: Any) -> None:
        events("pg_start")
        try:
            reconfigure(self, *args, **kwargs)
        finally:
            events("pg_done")

    def timed_report(self: Any, e: Exception) -> None:
        events("error", what=f"{type(e).__name__}: {str(e)[:160]}")
        report(self, e)

    Manager.__init__ = timed_init
    Manager._reconfigure_pg = timed_reconfigure
    Manager.report_error = timed_report


def main() -> int:
    run_dir, group = os.environ.get(ENV_RUN_DIR), os.environ.get(ENV_REPLICA_ID, "x")
    if run_dir:
        instrument(Events(Path(run_dir) / "timing" / f"{group}-{os.getpid()}.jsonl"))
    from lamplighter.trainer.main import main as trainer_main

    return trainer_main()


if __name__ == "__main__":
    raise SystemExit(main())
