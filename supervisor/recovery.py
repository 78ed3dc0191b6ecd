"""Finishing the actions a killed daemon left half done.

An action is journaled as intended before it runs and as done after. After a
crash, each intent without a done is looked at against the world first: if it
already happened (Slurm's Restarts count of the job went up, the node is
drained, the process is gone) it is confirmed, never repeated; only if it did
not happen is it carried out now. Both checks are callables passed in, so this
module knows nothing about Slurm.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lamplighter.supervisor.state_store import DaemonState, PendingAction

log = logging.getLogger(__name__)

CONFIRMED = "confirmed"  # it had happened before the crash
COMPLETED = "ok"  # it had not; done now
FAILED = "failed"  # it had not, and doing it now failed: the policy decides again from fresh observations
OBSERVED = "observed"  # it had not, and this daemon observes (node.yaml mode: observe): not done, only said


@dataclass(frozen=True)
class Resolution:
    action: PendingAction
    outcome: str
    detail: dict[str, Any]


def recover_pending(
    state: DaemonState,
    now: float,
    happened: Callable[[PendingAction], bool],
    redo: Callable[[PendingAction], dict[str, Any] | None],
    observe: bool = False,
) -> list[Resolution]:
    """Resolve every pending action, oldest first, journaling each outcome; observing, none is carried out (a
    daemon restarted in observe mode must not act on what its acting predecessor left half done)."""
    out: list[Resolution] = []
    for action in sorted(state.pending(), key=lambda a: (a.time, a.id)):
        prefix = f"recovery {action.id} {action.kind} {action.target}:"
        detail: dict[str, Any]
        if happened(action):
            detail = {"after_restart": True}
            state.record_done(now, action.id, CONFIRMED, detail)
            log.info("%s had already happened; not repeating it", prefix)
            out.append(Resolution(action, CONFIRMED, detail))
            continue
        if observe:
            detail = {"after_restart": True, "not_done": "mode observe"}
            state.record_done(now, action.id, OBSERVED, detail)
            log.warning("%s had not happened; would do it now (mode observe: not done)", prefix)
            out.append(Resolution(action, OBSERVED, detail))
            continue
        try:
            detail = {"after_restart": True, **(redo(action) or {})}
            outcome = COMPLETED
            log.info("%s had not happened; done now", prefix)
        except Exception as e:  # any failure is journaled; the policy decides again
            detail = {"after_restart": True, "error": f"{type(e).__name__}: {e}"}
            outcome = FAILED
            log.warning("%s had not happened and failed now: %s", prefix, e)
        state.record_done(now, action.id, outcome, detail)
        out.append(Resolution(action, outcome, detail))
    return out
