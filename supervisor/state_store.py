"""The daemon's persisted state: what a restarted daemon needs to carry on.

A snapshot (``state.json``, replaced atomically and fsync'd) plus the journal
of changes since (``journal.jsonl``, see state_journal.py). Every change is one
journal record written before the call returns, so SIGKILL at any point loses
nothing that was acknowledged; ``load`` replays the journal onto the snapshot.

API for the main loop (time is always passed in; nothing here reads a clock):

    state = DaemonState.load(state_dir)          # takes an exclusive lock on the dir
    a = state.record_intent(now, "requeue", target="1234", reason=..., observation={...},
                            before={"restarts": 3}, restart_group="job-a/2")
    ... carry out the action ...
    state.record_done(now, a.id, "ok", result={...})
    state.pending()                              # intents without a done: see recovery.py
    state.bump_restart(now, "job-a/2") -> int    # a restart not tied to an action (local mode)
    state.restarts("job-a/2") -> int; state.restart_counts() -> dict
    state.set_baseline(now, "gpu0", {"ecc_uncorrectable": 4}); state.baselines() -> dict
    state.record_event(now, "fault", {...}); state.events() -> recent events, newest last
    state.drains() -> [(time, node)] of done drains, for ratelimit.may_drain
    state.drain_history() -> [(time, node)] of done drains and mark-downs among the recent events
    state.set_policy(now, "vm_faults", [...]); state.policy() -> the policy's persisted parts (by key)
    state.policy_entry("auto_resume") -> one of them (the per-cycle readers copy only what they read)
    state.save()                                 # compaction; also automatic every compact_every records
    state.close()

An intent that also counts as a group restart (requeue, local restart) passes
restart_group: the count is bumped by the same journal record, so a crash can
neither lose nor double the count, and completing the intent after a restart
does not count it again.
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lamplighter.rundir.contract import write_json_atomic
from lamplighter.supervisor.state_journal import Journal, JournalError

SNAPSHOT = "state.json"
JOURNAL = "journal.jsonl"
LOCK = "lock"
FORMAT_VERSION = 1


class StateError(Exception):
    """The state directory cannot be used; the message names it."""


# What an admin who rolled back (deploy/README.md, "Rolling back") does with a state the older daemon cannot read.
ROLLBACK_HINT = (
    "reinstall the version that wrote it, or move the state directory away to start empty "
    "(restart budgets, GPU baselines and the drain history are then forgotten)"
)


@dataclass(frozen=True)
class PendingAction:
    """An action journaled as intended and not (yet) known to be done."""

    id: str
    time: float
    kind: str
    target: str
    reason: str
    observation: dict[str, Any] = field(default_factory=dict)
    before: dict[str, Any] = field(default_factory=dict)  # the world as seen before acting
    restart_group: str | None = None


def _empty(max_events: int) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "seq": 0,
        "restarts": {},
        "baselines": {},
        "pending": {},
        "drains": [],
        "events": [],
        "policy": {},
        "max_events": max_events,
    }


def apply(data: dict[str, Any], rec: dict[str, Any]) -> None:
    """Apply one journal record to the state dict; the one place that defines what a record means."""
    seq = rec.get("seq", 0)
    if seq <= data["seq"]:
        return  # already in the snapshot (a crash after compaction, before the journal was replaced)
    data["seq"] = seq
    typ = rec.get("type")
    if typ == "intent":
        a = rec["action"]
        data["pending"][a["id"]] = a
        if a.get("restart_group") is not None:
            g = a["restart_group"]
            data["restarts"][g] = data["restarts"].get(g, 0) + 1
    elif typ == "done":
        a = data["pending"].pop(rec["id"], None)
        if a is not None and a["kind"] == "drain" and rec.get("outcome") in ("ok", "confirmed"):
            data["drains"].append([a["time"], a["target"]])
            del data["drains"][: -max(data["max_events"], 1)]
    elif typ == "restart":
        g = rec["group"]
        data["restarts"][g] = data["restarts"].get(g, 0) + 1
    elif typ == "baseline":
        data["baselines"][rec["key"]] = rec["values"]
    elif typ == "policy":
        data["policy"][rec["key"]] = rec["value"]
    elif typ != "event":
        raise JournalError(f"unknown journal record type {typ!r} at seq {seq} (a newer lamplighter's?)")
    if typ in ("event", "intent", "done"):
        data["events"].append(rec)
        del data["events"][: -max(data["max_events"], 1)]


def write_json_durable(path: Path, obj: Any) -> None:
    """Write JSON atomically and fsync'd (file and directory): the daemon's state survives power loss too."""
    write_json_atomic(path, obj, durable=True)


class DaemonState:
    """Snapshot + journal in one directory. Thread-safe: the status socket reads it from its own thread."""

    def __init__(
        self, state_dir: Path, data: dict[str, Any], journal: Journal, lock_fd: int, compact_every: int
    ) -> None:
        self.state_dir = state_dir
        self._data = data
        self._journal = journal
        self._lock_fd = lock_fd
        self._compact_every = compact_every
        self._since_snapshot = 0
        self._mutex = threading.RLock()

    @classmethod
    def load(cls, state_dir: Path, *, compact_every: int = 1000, max_events: int = 200) -> DaemonState:
        """Open (creating it 0750 if needed) and recover the state directory; exclusive per directory."""
        try:
            state_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        except OSError as e:
            raise StateError(f"state dir {state_dir}: cannot create: {e}") from e
        lock_fd = os.open(state_dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            os.close(lock_fd)
            raise StateError(f"state dir {state_dir}: another daemon holds {state_dir / LOCK}") from e
        try:
            data = _read_snapshot(state_dir / SNAPSHOT, max_events)
            data["max_events"] = max_events
            journal, records = Journal.open(state_dir / JOURNAL, first_seq=data["seq"] + 1)
            for rec in records:
                apply(data, rec)
        except JournalError as e:
            os.close(lock_fd)
            raise StateError(f"{e} (in {state_dir}): {ROLLBACK_HINT}") from e
        except BaseException:
            os.close(lock_fd)
            raise
        state = cls(state_dir, data, journal, lock_fd, compact_every)
        state._since_snapshot = len(records)
        return state

    # -- changes (each one journal record) -------------------------------------------------

    def record_intent(
        self,
        now: float,
        kind: str,
        target: str,
        reason: str,
        observation: dict[str, Any] | None = None,
        before: dict[str, Any] | None = None,
        restart_group: str | None = None,
    ) -> PendingAction:
        """Journal an action before carrying it out; returns it with its id."""
        with self._mutex:
            action = PendingAction(
                id=f"a{self._journal.next_seq}",
                time=now,
                kind=kind,
                target=target,
                reason=reason,
                observation=dict(observation or {}),
                before=dict(before or {}),
                restart_group=restart_group,
            )
            self._append({"type": "intent", "t": now, "action": asdict(action)})
            return action

    def record_done(self, now: float, action_id: str, outcome: str, result: dict[str, Any] | None = None) -> None:
        """Journal that an intended action finished: outcome "ok", "confirmed" (found done), "failed", ..."""
        with self._mutex:
            if action_id not in self._data["pending"]:
                raise StateError(f"state dir {self.state_dir}: no pending action {action_id!r}")
            self._append({"type": "done", "t": now, "id": action_id, "outcome": outcome, "result": result or {}})

    def bump_restart(self, now: float, group: str) -> int:
        with self._mutex:
            self._append({"type": "restart", "t": now, "group": group})
            return int(self._data["restarts"][group])

    def set_baseline(self, now: float, key: str, values: dict[str, Any]) -> None:
        with self._mutex:
            self._append({"type": "baseline", "t": now, "key": key, "values": values})

    def set_policy(self, now: float, key: str, value: Any) -> None:
        """Persist one part of the node policy's state (e.g. the VM fault history), replacing the last."""
        with self._mutex:
            self._append({"type": "policy", "t": now, "key": key, "value": value})

    def record_event(self, now: float, kind: str, data: dict[str, Any] | None = None) -> None:
        with self._mutex:
            self._append({"type": "event", "t": now, "kind": kind, "data": data or {}})

    # -- reads --------------------------------------------------------------------------

    def pending(self) -> list[PendingAction]:
        with self._mutex:
            return [PendingAction(**a) for a in self._data["pending"].values()]

    def restarts(self, group: str) -> int:
        with self._mutex:
            return int(self._data["restarts"].get(group, 0))

    def restart_counts(self) -> dict[str, int]:
        with self._mutex:
            return dict(self._data["restarts"])

    def baselines(self) -> dict[str, dict[str, Any]]:
        with self._mutex:
            return copy.deepcopy(self._data["baselines"])

    def policy(self) -> dict[str, Any]:
        with self._mutex:
            return copy.deepcopy(self._data["policy"])

    def policy_entry(self, key: str) -> Any:
        with self._mutex:
            return copy.deepcopy(self._data["policy"].get(key))

    def drain_history(self) -> list[tuple[float, str]]:
        # Read in place: copying every recent event each cycle was the idle daemon's cost of auto-resume.
        with self._mutex:
            return drain_history(self._data["events"])

    def drains(self) -> list[tuple[float, str]]:
        with self._mutex:
            return [(float(t), str(n)) for t, n in self._data["drains"]]

    def events(self) -> list[dict[str, Any]]:
        with self._mutex:
            return copy.deepcopy(self._data["events"])

    def snapshot(self) -> dict[str, Any]:
        """A copy of everything, for the status socket."""
        with self._mutex:
            return copy.deepcopy(self._data)

    # -- persistence --------------------------------------------------------------------

    def save(self) -> None:
        """Compact: write the snapshot, then start an empty journal after it."""
        with self._mutex:
            self._data["seq"] = self._journal.next_seq - 1
            write_json_durable(self.state_dir / SNAPSHOT, self._data)
            # A crash here leaves the old journal next to the new snapshot: its
            # records have seq <= the snapshot's and are skipped on replay.
            empty = self.state_dir / f".{JOURNAL}.new"
            empty.write_bytes(b"")
            os.replace(empty, self.state_dir / JOURNAL)
            self._journal.close()
            self._journal, _ = Journal.open(self.state_dir / JOURNAL, first_seq=self._data["seq"] + 1)
            self._since_snapshot = 0

    def close(self) -> None:
        with self._mutex:
            self._journal.close()
            if self._lock_fd >= 0:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = -1

    def _append(self, record: dict[str, Any]) -> None:
        rec = self._journal.append(record)
        apply(self._data, rec)
        self._since_snapshot += 1
        if self._since_snapshot >= self._compact_every:
            self.save()


def _read_snapshot(path: Path, max_events: int) -> dict[str, Any]:
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return _empty(max_events)
    except OSError as e:
        raise StateError(f"snapshot {path}: cannot read: {e}") from e
    try:
        data = json.loads(raw)
    except ValueError as e:
        # Written by rename, so never torn: damage came from outside. Refuse rather than forget budgets.
        raise StateError(f"snapshot {path}: damaged ({e}); move it away to start with empty state") from e
    if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
        found = data.get("version") if isinstance(data, dict) else None
        newer = isinstance(found, int) and found > FORMAT_VERSION
        what = f"version {found}, written by a newer lamplighter" if newer else "not a lamplighter state"
        raise StateError(f"snapshot {path}: {what}; this one reads version {FORMAT_VERSION}: {ROLLBACK_HINT}")
    base = _empty(max_events)
    base.update(data)
    return base


def drain_history(events: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """(time, node) of drains and mark-downs this daemon carried out, from its journaled events; a drain undone
    at once for the cluster's budget (drain_undone) drained nothing that stays, and is left out."""
    intents = {e["action"]["id"]: e["action"] for e in events if e.get("type") == "intent"}
    undone = {e["data"].get("id") for e in events if e.get("type") == "event" and e.get("kind") == "drain_undone"}
    out = []
    for e in events:
        if e.get("type") == "done" and e.get("outcome") in ("ok", "confirmed") and e.get("id") not in undone:
            a = intents.get(e.get("id", ""))
            if a is not None and a["kind"] in ("drain", "mark_down"):
                out.append((float(a["time"]), str(a["target"])))
    return out
