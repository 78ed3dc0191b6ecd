"""kill-healer: the peer a restarted group heals from dies during the transfer.

Armed at its planned time on a group A: A's trainers are killed (SIGKILL),
and a watcher waits for A's new attempt to heal. The peer that sends the
state announces it (the trainer contract's `heal/<group>.sending`, rewritten
by torchft's state_dict callback right before the transfer), and the watcher
kills that peer at once, while the receiver is still reading. The injection
record (event "injected", kind "kill-healer", the healer's group) is
journalled then; a heal that never starts within the watch time is
journalled as "missed". A trainer that announces no sends cannot be hit this
way: every such arm ends missed, saying why.
"""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lamplighter.rundir.contract import RunPaths
from lamplighter.slurm.chaos import proc_find
from lamplighter.slurm.run import SlurmError

if TYPE_CHECKING:
    from lamplighter.slurm.chaos.inject import ChaosContext, ChaosTarget

WATCH_S = 120.0  # A is requeued, started and asks for a heal well within this
POLL_S = 0.005  # the transfer of a large state takes ~100 ms and more: look often


def arm(ctx: ChaosContext, tgt: ChaosTarget, detail: dict[str, Any]) -> Callable[[], None]:
    """The action that kills group A and starts watching for the peer that heals it."""
    assert tgt.group is not None
    healing = tgt.group
    procs = proc_find.trainer_procs(ctx.sub.job, healing)
    if not procs:
        from lamplighter.slurm.chaos.inject import ChaosError

        raise ChaosError(f"kill-healer: no trainer process of job {ctx.sub.job} group {healing} found in /proc")

    def act() -> None:
        detail["healing_group"] = healing
        detail["healing_pids"] = proc_find.signal_procs(procs, signal.SIGKILL)
        t_armed = ctx.now()
        detail["t_armed"] = t_armed
        threading.Thread(
            target=_watch, args=(ctx, healing, t_armed), name=f"kill-healer-{healing}", daemon=True
        ).start()
        ctx.pending_healers += 1

    return act


def announced_send(path: Path, after: float) -> bool:
    """True when the group announced a send after `after` (the file is replaced atomically: never torn)."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(rec, dict) and isinstance(rec.get("t"), (int, float)) and rec["t"] > after


def _watch(ctx: ChaosContext, healing: int, t_armed: float) -> None:
    from lamplighter.slurm.chaos.inject import append_record

    paths = RunPaths(Path(ctx.sub.run_dir))
    peers = [g for g in ctx.sub.groups if g != healing]
    deadline = time.monotonic() + WATCH_S
    rec: dict[str, Any] | None = None
    while time.monotonic() < deadline and rec is None:
        for g in peers:
            if announced_send(paths.heal_sending(g), t_armed):
                rec = _kill_healer(ctx, g, healing, t_armed) or {
                    "event": "missed",
                    "t": ctx.now(),
                    "kind": "kill-healer",
                    "group": g,
                    "why": f"group {g} announced a send to group {healing} but has no trainer process left",
                }
                break
        else:
            time.sleep(POLL_S)
    if rec is None:
        rec = {
            "event": "missed",
            "t": ctx.now(),
            "kind": "kill-healer",
            "group": healing,
            "why": f"no peer announced a send to group {healing}'s new attempt within {WATCH_S:g} s",
        }
    append_record(ctx.journal, rec)
    ctx.fired.put(rec)


def _kill_healer(ctx: ChaosContext, g: int, healing: int, t_armed: float) -> dict[str, Any] | None:
    """Kill the sending peer now; its Slurm state is read after (a requeue takes longer than a read)."""
    procs = proc_find.trainer_procs(ctx.sub.job, g)
    if not procs:
        return None
    t = ctx.now()
    pids = proc_find.signal_procs(procs, signal.SIGKILL)
    jid = ctx.sub.groups[g]
    node: str | None = None
    restarts = 0
    try:
        from lamplighter.slurm.hostlist import expand_hostlist

        info = ctx.api.job(jid)
        restarts = info.restarts
        nodes = expand_hostlist(info.node_list or "")
        node = nodes[0] if nodes else None
    except SlurmError:
        pass
    from lamplighter.slurm.chaos.inject import latest_attempt

    return {
        "event": "injected",
        "t": t,
        "kind": "kill-healer",
        "group": g,
        "node": node,
        "job_id": jid,
        "restarts_before": restarts,
        "attempt_before": latest_attempt(Path(ctx.sub.run_dir), g, restarts),
        "detail": {"pids": pids, "healing_group": healing, "t_armed": t_armed, "after_arming_s": round(t - t_armed, 3)},
    }


def drain(fired: queue.Queue[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    while True:
        try:
            out.append(fired.get_nowait())
        except queue.Empty:
            return out
