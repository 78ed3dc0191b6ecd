"""The records a user-reads helper answers, and the daemon's check of each before it believes a value.

A helper runs as the job's user, so what it answers is the job's word at best and, if a parser bug
handed the helper to the user, anything at all. The daemon takes a record only as this module checks
it: known keys, each of its own type (a bool is not an int), numbers finite, text and lists bounded;
a job's settings pass the same schema they passed in the helper. Anything else is a RecordError, a
failed read, never a value. The helper side (`*_record`) and the daemon side (`*_from`) sit together so
that one cannot change without the other.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from lamplighter.configs.schema import HealthConfig, RestartConfig
from lamplighter.lighthouse.status import (
    Heartbeat,
    LighthouseStatus,
    LighthouseStatusError,
    LighthouseStatusUnreadable,
    Member,
)
from lamplighter.supervisor.node.job_settings import JobSettings, fallback

MAX_RECORD_BYTES = 4 << 20  # a Lighthouse page's record for thousands of members; job.json's is ~2 KiB
MAX_TEXT = 4096  # a path, an address, a reason
MAX_ITEMS = 16384  # members or heartbeats of one Lighthouse


class RecordError(ValueError):
    """The helper's answer is not a record of this kind."""


def _text(v: Any, what: str, none: bool = False) -> Any:
    if v is None and none:
        return None
    if not isinstance(v, str) or len(v) > MAX_TEXT:
        raise RecordError(f"{what}: not a string of at most {MAX_TEXT} characters")
    return v


def _int(v: Any, what: str, none: bool = False) -> Any:
    if v is None and none:
        return None
    if type(v) is not int or abs(v) >= 1 << 63:
        raise RecordError(f"{what}: not an integer")
    return v


def _float(v: Any, what: str, none: bool = False) -> Any:
    if v is None and none:
        return None
    if type(v) not in (int, float) or not math.isfinite(v):
        raise RecordError(f"{what}: not a finite number")
    return float(v)


def _bool(v: Any, what: str) -> bool:
    if type(v) is not bool:
        raise RecordError(f"{what}: not true or false")
    return bool(v)


def _keys(rec: Any, keys: set[str], what: str) -> dict[str, Any]:
    if not isinstance(rec, dict) or set(rec) != keys:
        have = sorted(rec) if isinstance(rec, dict) else type(rec).__name__
        raise RecordError(f"{what}: keys {have}, expected {sorted(keys)}")
    return rec


def _list(v: Any, what: str) -> list[Any]:
    if not isinstance(v, list) or len(v) > MAX_ITEMS:
        raise RecordError(f"{what}: not a list of at most {MAX_ITEMS}")
    return v


# -- a job's settings (job.json) ---------------------------------------------------------

SETTINGS_KEYS = {"health", "restart", "lighthouse", "run_dir", "target_step"}
ERROR_KEYS = {"error", "retryable"}


def settings_record(s: JobSettings) -> dict[str, Any]:
    """Helper side: the settings read, or why not (the file's path and owner are the daemon's own)."""
    if s.error is not None:
        return {"error": s.error, "retryable": s.retryable}
    return {
        "health": s.health.model_dump(mode="json"),
        "restart": s.restart.model_dump(mode="json"),
        "lighthouse": s.lighthouse,
        "run_dir": s.run_dir,
        "target_step": s.target_step,
    }


def settings_from(rec: dict[str, Any], path: str, owner: int) -> JobSettings:
    """Daemon side: the job's settings from its record; the fallback when the helper said why not."""
    if "error" in rec:
        r = _keys(rec, ERROR_KEYS, "settings")
        return fallback(_text(r["error"], "error"), path, owner, retryable=_bool(r["retryable"], "retryable"))
    r = _keys(rec, SETTINGS_KEYS, "settings")
    try:
        health = HealthConfig.model_validate(r["health"], strict=True)
        restart = RestartConfig.model_validate(r["restart"], strict=True)
    except ValidationError as e:
        raise RecordError(f"settings: {e.error_count()} values the schema refuses") from None
    lighthouse = _text(r["lighthouse"], "lighthouse", none=True)
    if lighthouse is not None and not lighthouse.startswith(("http://", "https://")):
        raise RecordError("lighthouse: not an http(s) URL")
    return JobSettings(
        health=health,
        restart=restart,
        lighthouse=lighthouse,
        run_dir=_text(r["run_dir"], "run_dir", none=True),
        target_step=_int(r["target_step"], "target_step", none=True),
        source=path,
        owner=owner,
    )


# -- the address a job's Lighthouse published (lighthouse.json) --------------------------

ADDRESS_KEYS = {"address", "why"}


def address_record(address: str | None, why: str | None) -> dict[str, Any]:
    return {"address": address, "why": why}


def address_from(rec: dict[str, Any]) -> tuple[str | None, str | None]:
    r = _keys(rec, ADDRESS_KEYS, "address")
    address, why = _text(r["address"], "address", none=True), _text(r["why"], "why", none=True)
    if address is not None and (why is not None or not address.startswith(("http://", "https://"))):
        raise RecordError("address: not an http(s) URL alone")
    return address, why


# -- a Lighthouse's /status page ----------------------------------------------------------

STATUS_KEYS = {"quorum_id", "next_quorum", "previous_quorum_id", "quorum_age_s", "members", "heartbeats"}
STATUS_ERROR_KEYS = {"error", "unreadable"}


def status_record(st: LighthouseStatus) -> dict[str, Any]:
    return {
        "quorum_id": st.quorum_id,
        "next_quorum": st.next_quorum,
        "previous_quorum_id": st.previous_quorum_id,
        "quorum_age_s": st.quorum_age_s,
        "members": [[m.replica_id, m.step, m.manager, m.store, m.world_size, m.recovering] for m in st.members],
        "heartbeats": [[h.replica_id, h.age_s, h.old] for h in st.heartbeats],
    }


def status_error_record(e: LighthouseStatusError) -> dict[str, Any]:
    return {"error": str(e)[:MAX_TEXT], "unreadable": isinstance(e, LighthouseStatusUnreadable)}


def status_from(rec: dict[str, Any]) -> LighthouseStatus:
    """The page's quorum; raises the helper's LighthouseStatusError (Unreadable: a page of another torchft)."""
    if "error" in rec:
        r = _keys(rec, STATUS_ERROR_KEYS, "status")
        cls = LighthouseStatusUnreadable if _bool(r["unreadable"], "unreadable") else LighthouseStatusError
        raise cls(_text(r["error"], "error"))
    r = _keys(rec, STATUS_KEYS, "status")
    members = []
    for i, m in enumerate(_list(r["members"], "members")):
        if not isinstance(m, list) or len(m) != 6:
            raise RecordError(f"members[{i}]: not 6 values")
        w = f"members[{i}]"
        members.append(
            Member(_text(m[0], w), _int(m[1], w), _text(m[2], w), _text(m[3], w), _int(m[4], w), _bool(m[5], w))
        )
    heartbeats = []
    for i, h in enumerate(_list(r["heartbeats"], "heartbeats")):
        if not isinstance(h, list) or len(h) != 3:
            raise RecordError(f"heartbeats[{i}]: not 3 values")
        w = f"heartbeats[{i}]"
        heartbeats.append(Heartbeat(_text(h[0], w), _float(h[1], w), _bool(h[2], w)))
    return LighthouseStatus(
        quorum_id=_int(r["quorum_id"], "quorum_id"),
        next_quorum=_text(r["next_quorum"], "next_quorum"),
        previous_quorum_id=_int(r["previous_quorum_id"], "previous_quorum_id", none=True),
        quorum_age_s=_float(r["quorum_age_s"], "quorum_age_s", none=True),
        members=members,
        heartbeats=heartbeats,
    )
