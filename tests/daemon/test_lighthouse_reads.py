"""Reading a job's Lighthouse off the daemon's cycle, and only where Slurm runs that job's Lighthouse."""

from __future__ import annotations

import itertools
import threading

import pytest

from lamplighter.lighthouse.status import LighthouseStatus, LighthouseStatusError
from lamplighter.slurm.parsers import JobInfo, job_from_fields
from lamplighter.supervisor.node.lighthouse_reads import LighthouseReads, Place, check_address, table_place

HEAD = Place("n1", frozenset({"n1", "head01"}), frozenset({"127.0.0.1"}))
STATUS = LighthouseStatus(quorum_id=3, next_quorum="", previous_quorum_id=None, quorum_age_s=None)


def test_only_the_node_where_the_jobs_lighthouse_runs_is_read() -> None:
    check_address("http://head01:29510", HEAD)
    check_address("http://127.0.0.1:29510", HEAD)  # an address of the node
    check_address("http://localhost:29510", HEAD)  # a name that resolves to one
    for elsewhere in ("http://169.254.169.254/latest", "http://10.255.255.1:80", "http://[::1]:1"):
        with pytest.raises(LighthouseStatusError, match="is not node n1, where the job's Lighthouse runs"):
            check_address(elsewhere, HEAD)


def settle(reads: LighthouseReads, key: tuple[str, int]) -> None:
    """The read in flight has finished (the test's own wait; the daemon never waits)."""
    t = reads._jobs[key].thread
    assert t is not None
    t.join(10)


def test_the_cycle_takes_the_latest_answer_and_never_waits() -> None:
    gate = threading.Event()
    calls: list[str] = []

    def fetch(address: str, timeout: float) -> LighthouseStatus:
        calls.append(address)
        assert gate.wait(10)
        return STATUS

    now = [100.0]
    reads = LighthouseReads(fetch, lambda job, uid: HEAD, clock=lambda: now[0])
    read = reads.reader("llama", 1001)
    with pytest.raises(LighthouseStatusError, match=r"first read of http://head01:1 is under way"):
        read("http://head01:1", 0.5)
    with pytest.raises(LighthouseStatusError, match="under way"):
        read("http://head01:1", 0.5)  # still in flight: one read at a time, no second one started
    assert calls == ["http://head01:1"]
    gate.set()
    settle(reads, ("llama", 1001))
    now[0] += 0.5
    assert read("http://head01:1", 0.5) is STATUS  # the answer; the next read waits for its turn
    assert calls == ["http://head01:1"]
    now[0] += reads.every_s
    assert read("http://head01:1", 0.5) is STATUS  # the last answer, and a new read started
    settle(reads, ("llama", 1001))
    assert len(calls) == 2


def test_a_jobs_status_page_is_read_at_most_every_few_seconds_not_every_cycle() -> None:
    """make scale: reading every member of a 64-group job every 0.5-s cycle took a compute daemon from 0.006 to
    0.024 cores."""
    calls: list[float] = []
    now = [100.0]
    reads = LighthouseReads(lambda a, t: calls.append(now[0]) or STATUS, lambda job, uid: HEAD, clock=lambda: now[0])
    read = reads.reader("llama", 1001)
    for _ in range(40):  # 20 s of 0.5-s cycles
        try:
            read("http://head01:1", 0.5)
        except LighthouseStatusError:
            pass  # the first read under way
        settle(reads, ("llama", 1001))
        now[0] += 0.5
    assert len(calls) == 10 and all(b - a >= reads.every_s for a, b in itertools.pairwise(calls))


def test_a_read_elsewhere_is_refused_before_any_connection() -> None:
    calls: list[str] = []
    reads = LighthouseReads(lambda a, t: calls.append(a) or STATUS, lambda job, uid: HEAD)
    read = reads.reader("llama", 1001)
    with pytest.raises(LighthouseStatusError):
        read("http://169.254.169.254:80", 0.5)
    settle(reads, ("llama", 1001))
    with pytest.raises(LighthouseStatusError, match=r"169\.254\.169\.254 is not node n1"):
        read("http://169.254.169.254:80", 0.5)
    assert calls == []


def test_no_lighthouse_job_of_the_same_user_no_read() -> None:
    def nowhere(job: str, uid: int) -> Place:
        raise LighthouseStatusError(f"no running Lighthouse job ll-{job}-lighthouse of uid {uid}")

    reads = LighthouseReads(lambda a, t: STATUS, nowhere)
    read = reads.reader("llama", 1001)
    with pytest.raises(LighthouseStatusError):
        read("http://head01:1", 0.5)
    settle(reads, ("llama", 1001))
    with pytest.raises(LighthouseStatusError, match="no running Lighthouse job ll-llama-lighthouse of uid 1001"):
        read("http://head01:1", 0.5)


def record(name: str, state: str, node: str, uid: int) -> JobInfo:
    return job_from_fields(
        {"JobId": "40", "JobName": name, "JobState": state, "NodeList": node, "UserId": f"u{uid}({uid})"}
    )


def test_the_place_comes_from_the_heads_table_and_ring_and_slurm_only_when_they_cannot_say() -> None:
    table = {"ll-llama-lighthouse": [record("ll-llama-lighthouse", "RUNNING", "head01", 1001)]}
    ring = {"head01": "127.0.0.1"}
    place = table_place(table.get, ring.get, "ll-", "llama", 1001)
    assert place is not None and place.node == "head01" and "127.0.0.1" in place.addresses
    check_address("http://127.0.0.1:29510", place)
    assert table_place(table.get, ring.get, "ll-", "llama", 1002) is None  # another user's job of that name
    assert table_place(table.get, {}.get, "ll-", "llama", 1001) is None  # a node the ring does not hold
    assert table_place(lambda name: None, ring.get, "ll-", "llama", 1001) is None  # no fresh table
    pending = {"ll-llama-lighthouse": [record("ll-llama-lighthouse", "PENDING", "head01", 1001)]}
    assert table_place(pending.get, ring.get, "ll-", "llama", 1001) is None
