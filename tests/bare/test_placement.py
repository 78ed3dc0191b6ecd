"""The pure placement decision: every move has a reason, raises the epoch, and spares come last."""

from __future__ import annotations

import pytest

from lamplighter.bare.host_lease import fence_due, renew_every, renewal_deadline, renewal_due
from lamplighter.bare.keys import Keys, check_name
from lamplighter.bare.placement import Assignment, HostView, place

HOSTS = [HostView("h1", True), HostView("h2", True), HostView("h3", True), HostView("s1", True, spare=True)]


def placed(moves: list, base: dict[int, Assignment] | None = None) -> dict[int, Assignment]:
    out = dict(base or {})
    out.update({m.group: m.new for m in moves})
    return out


def test_first_placement_uses_the_job_hosts_in_order_then_nothing_moves() -> None:
    moves = place(3, {}, HOSTS)
    assert [(m.group, m.new.host, m.new.epoch) for m in moves] == [(0, "h1", 1), (1, "h2", 1), (2, "h3", 1)]
    assert all("not placed yet" in m.new.reason for m in moves)
    assert place(3, placed(moves), HOSTS) == []


def test_a_dead_host_sends_its_group_to_the_spare_with_a_new_epoch() -> None:
    now = placed(place(3, {}, HOSTS))
    hosts = [HostView("h1", True), HostView("h2", False), HostView("h3", True), HostView("s1", True, spare=True)]
    [m] = place(3, now, hosts)
    assert (m.group, m.old, m.new.host, m.new.epoch) == (1, now[1], "s1", 2)
    assert "h2's lease expired" in m.new.reason and "spare s1" in m.new.reason
    # h2 back alive: the group stays on the spare (no move back and forth)
    assert place(3, placed([m], now), HOSTS) == []


def test_taken_out_and_failed_there_move_too_and_never_back_to_the_failed_host() -> None:
    now = placed(place(2, {}, HOSTS))
    out = [HostView("h1", True, out="GPU 0 uncorrectable ECC"), *HOSTS[1:]]
    [m] = place(2, now, out)
    assert (m.group, m.new.host) == (0, "h3") and "taken out: GPU 0 uncorrectable ECC" in m.new.reason
    [f] = place(2, now, HOSTS, failed_on={1: "h2"})
    assert (f.group, f.new.host) == (1, "h3") and "cannot be restarted on h2" in f.new.reason


def test_with_no_usable_host_a_group_waits_unassigned_once() -> None:
    hosts = [HostView("h1", True), HostView("h2", False)]
    now = {0: Assignment("h1", 1), 1: Assignment("h2", 4)}
    [m] = place(2, now, hosts)
    assert (m.group, m.new.host, m.new.epoch) == (1, None, 5)  # epoch raised: h2's trainers are fenced
    assert "no usable host free: waiting" in m.new.reason
    assert place(2, placed([m], now), hosts) == []  # said once, not rewritten every cycle
    [back] = place(2, placed([m], now), [HostView("h1", True), HostView("h2", True)])
    assert (back.group, back.new.host, back.new.epoch) == (1, "h2", 6)


def test_assignment_round_trips_through_json() -> None:
    a = Assignment("h1", 7, 'reason with "quotes" and /slashes/')
    assert Assignment.from_json(a.to_json()) == a


@pytest.mark.parametrize("bad", ["", "a/b", "../x", "-rf", "a b", "x" * 129, "h1\n", "é"])
def test_names_that_could_reach_another_key_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="letters, digits"):
        check_name(bad, "host")
    with pytest.raises(ValueError):
        Keys("c").host(bad)


def test_a_host_fences_itself_before_its_lease_can_expire() -> None:
    assert fence_due(10.0, None, 3, 0.5)[0]
    due, why = fence_due(12.4, 10.0, 3, 0.5)
    assert not due and "0.1 s more" in why
    due, why = fence_due(12.5, 10.0, 3, 0.5)
    assert due and "not renewed for 2.5 s" in why


def test_a_renewal_ends_by_the_fence_deadline_and_past_the_expiry_waits_for_the_kills() -> None:
    # renewed at 10, ttl 3, margin 0.5: fence at 12.5, expiry at 13
    assert renewal_deadline(5.0, None, 3, 0.5) == (None, True)  # first registration: nothing runs yet
    assert renewal_deadline(11.0, 10.0, 3, 0.5) == (12.5, True)
    # Late (a stalled daemon): etcd may still hold the lease, and granting it proves the groups are still here.
    assert renewal_deadline(12.6, 10.0, 3, 0.5) == (13.0, True)
    assert renewal_deadline(13.0, 10.0, 3, 0.5) == (None, False)


def test_a_lease_is_renewed_at_half_the_time_before_the_fence_not_every_cycle() -> None:
    assert renew_every(8, 2) == 3.0 and renew_every(4, 2) == 1.0
    assert renewal_due(100.0, None, 8, 2)  # never renewed
    assert not renewal_due(102.9, 100.0, 8, 2) and renewal_due(103.0, 100.0, 8, 2)
    # A renewal that fails keeps it due every cycle, with as long again left before the fence.
    assert renewal_due(104.0, 100.0, 8, 2) and not fence_due(104.0, 100.0, 8, 2)[0]
