"""The bare-metal report's reading of the hosts' action lines: what detected a fault, and whether a cut-off host's
trainer was fenced before its group started elsewhere (and never committed after)."""

from __future__ import annotations

from typing import Any

from lamplighter.lab.bare_report import detection, fencing
from lamplighter.rundir.steplog import StepRecord


def line(
    ts: float, node: str, action: str, group: int | None = None, epoch: int = 1, reason: str = ""
) -> dict[str, Any]:
    rec: dict[str, Any] = {"ts": ts, "node": node, "action": action, "reason": reason}
    if group is not None:
        rec.update(job="j", group=group, epoch=epoch)
    return rec


def step(t: float, n: int, attempt: int) -> StepRecord:
    return StepRecord(
        t=t,
        replica_id=1,
        step=n,
        committed=True,
        participants=2,
        quorum_id=1,
        healed_from=None,
        loss=1.0,
        state_hash="",
        attempt=attempt,
        samples=16,
        first_sample=0,
    )


ACTIONS = [
    line(9.0, "h2", "start", 1),  # before the fault: not its detection
    line(10.5, "h1", "ended", 0),  # another group
    line(11.0, "h3", "out", reason="GPU 0: uncorrectable ECC"),
    line(12.0, "h2", "kill", 1, reason="fencing: lease not renewed for 2.1 s"),
    line(14.2, "h4", "move", 1, epoch=2, reason="host h2's lease expired: to s1"),
    line(14.9, "s1", "start", 1, epoch=2),
]


def test_detection_is_the_first_action_about_the_group_or_its_host_after_the_fault() -> None:
    assert detection({"t": 10.0, "group": 1, "host": "h2"}, ACTIONS) == ACTIONS[3]
    assert detection({"t": 10.0, "group": 2, "host": "h3"}, ACTIONS) == ACTIONS[2]  # the host taken out
    assert detection({"t": 10.0, "group": 0, "host": "h1"}, ACTIONS) == ACTIONS[1]
    assert detection({"t": 15.0, "group": 1, "host": "h2"}, ACTIONS) is None


def test_fenced_only_when_killed_before_the_new_start_and_silent_after_it() -> None:
    fault = {"t": 10.0, "host": "h2", "group": 1, "epoch": 1, "epoch_after": 2}
    quiet = [step(11.0, 40, 1), step(15.5, 41, 2)]
    f = fencing(fault, ACTIONS, quiet)
    assert f["fenced"] and f["fence_before_start_s"] == 2.9 and f["stale_commits"] == []
    # The old epoch committed after the group started elsewhere: split brain, not fenced.
    assert fencing(fault, ACTIONS, [*quiet, step(15.2, 41, 1)])["stale_commits"] == [41]
    assert not fencing(fault, ACTIONS, [*quiet, step(15.2, 41, 1)])["fenced"]
    # Killed only after the new start: not fenced either.
    late = [a for a in ACTIONS if a["action"] != "kill"] + [line(15.0, "h2", "kill", 1, reason="fencing: late")]
    assert not fencing(fault, sorted(late, key=lambda a: a["ts"]), quiet)["fenced"]
    # Never killed (e.g. only moved): not fenced.
    assert not fencing(fault, [a for a in ACTIONS if a["action"] != "kill"], quiet)["fenced"]
