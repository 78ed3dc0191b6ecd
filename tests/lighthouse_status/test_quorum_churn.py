"""Quorums that keep leaving live groups out are reported once, with the setting that causes them (pure)."""

from __future__ import annotations

from lamplighter.lighthouse.quorum_churn import CHANGES, REPEAT_S, QuorumChurn
from lamplighter.lighthouse.status import Heartbeat, LighthouseStatus, Member


def status(quorum_id: int, in_quorum: list[str], alive: list[str]) -> LighthouseStatus:
    members = [Member(f"{g}:u", 5, "m", "s", 1, False) for g in in_quorum]
    beats = [Heartbeat(f"{g}:u", 0.05, False) for g in alive]
    return LighthouseStatus(quorum_id, "", quorum_id - 1, 0.1, members, beats)


GROUPS = ["g0", "g1", "g2", "g3"]


def test_quorums_that_leave_live_groups_out_every_step_are_reported_once_with_the_cause() -> None:
    churn = QuorumChurn(1000)
    said = [churn.observe(float(q), status(q, GROUPS[q % 2 :: 2] + ["g3"], GROUPS)) for q in range(1, CHANGES + 2)]
    assert said[:-1] == [None] * CHANGES  # the first read is where it starts, then CHANGES - 1 more changes
    assert said[-1] is not None and "join_timeout_ms (1000 ms)" in said[-1] and "above the longest step" in said[-1]
    # The same quorum read again is not another change; the next change within REPEAT_S is not said again.
    assert churn.observe(10.0, status(CHANGES + 1, ["g1", "g3"], GROUPS)) is None
    assert churn.observe(11.0, status(CHANGES + 2, ["g0", "g3"], GROUPS)) is None
    assert churn.observe(11.0 + REPEAT_S, status(CHANGES + 3, ["g1", "g3"], GROUPS)) is not None


def test_a_group_restarting_or_a_quorum_of_every_live_group_is_not_churn() -> None:
    churn = QuorumChurn(None)
    reads = (
        [
            status(1, GROUPS, GROUPS),
            status(2, GROUPS[1:], GROUPS[1:]),  # g0 died: it left the quorum and stopped heartbeating
            status(2, GROUPS[1:], GROUPS),  # g0's new process heartbeats while it loads: the same quorum
            status(3, GROUPS, GROUPS),  # and is back
        ]
        + [status(q, GROUPS, GROUPS) for q in range(4, 12)]
    )  # quorums of all, however many
    assert [churn.observe(float(i), s) for i, s in enumerate(reads)] == [None] * len(reads)
