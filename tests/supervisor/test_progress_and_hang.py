"""Group progress from heartbeat files and from the Lighthouse, and the hang check built on them.

The Lighthouse pages are built by the real parser from recorded torchft pages
(tests/lighthouse_status/recorded) and from LighthouseStatus records; the
time is passed in, so no test sleeps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from static_table import StaticTable

from lamplighter.lighthouse.progress import LighthouseProgress, group_of
from lamplighter.lighthouse.status import (
    LighthouseStatus,
    LighthouseStatusError,
    Member,
    parse_status,
)
from lamplighter.rundir.contract import RunPaths, write_json_atomic
from lamplighter.rundir.heartbeats import HeartbeatFiles
from lamplighter.supervisor.checks.hang import HangCheck, group_attempts, progress_sources
from lamplighter.system.trainer_proc import TrainerProc
from lamplighter.trainer.heartbeat import beat, heartbeat_path

REC = Path(__file__).parent.parent / "lighthouse_status" / "recorded"


def member(rid: str, step: int, recovering: bool = False) -> Member:
    return Member(rid, step, "http://h:1", "h:2", 1, recovering)


def status(*members: Member, qid: int = 1) -> LighthouseStatus:
    return LighthouseStatus(qid, "", qid, 0.1, list(members), [])


class Pages:
    """A Lighthouse whose next /status answer the test sets (or an outage)."""

    def __init__(self) -> None:
        self.next: LighthouseStatus | None = status()

    def __call__(self) -> LighthouseStatus:
        if self.next is None:
            raise LighthouseStatusError("cannot read http://h:1/status: connection refused")
        return self.next


def table(*procs: tuple[int, int, float]) -> StaticTable:
    """(group, attempt, started_at) per process."""
    return StaticTable(
        [
            TrainerProc(group=g, rank=i, attempt=a, pid=100 + 10 * g + i, started_at=t)
            for i, (g, a, t) in enumerate(procs)
        ]
    )


@pytest.mark.parametrize(
    ("rid", "group"),
    [("3:7d1e0c52-8a43", 3), ("torchtitan_ft_12:ab-cd", 12), ("job_group7", 7), ("0", 0), ("trainer:1234", None)],
)
def test_group_of_reads_the_number_the_name_ends_with(rid: str, group: int | None) -> None:
    assert group_of(rid) == group


def test_recorded_page_is_read_and_a_replica_progresses_when_its_step_changes() -> None:
    page = parse_status((REC / "status_recovering.html").read_text())
    lp = LighthouseProgress(lambda: page)
    lp.refresh(10.0)
    assert lp.steps() == {0: 57, 1: 0}
    assert lp.last_progress(0, 0, 5.0) is None  # seen once: no change yet
    assert lp.excused_until(10.0) == 10.0  # nothing could be seen before the first read
    page = parse_status((REC / "status_recovering.html").read_text().replace("Step: 57", "Step: 58"))
    lp.refresh(11.0)
    p = lp.last_progress(0, 0, 5.0)
    assert p is not None and (p.t, p.step) == (11.0, 58)
    assert lp.last_progress(0, 0, 11.0) is None  # the attempt started after it
    assert lp.last_progress(2, 0, 5.0) is None  # not in the quorum


def test_lighthouse_progress_follows_each_process_and_ignores_earlier_attempts() -> None:
    pages = Pages()
    lp = LighthouseProgress(pages)
    pages.next = status(member("torchtitan_ft_0:a", 5), member("torchtitan_ft_1:b", 5))
    lp.refresh(1.0)
    pages.next = status(member("torchtitan_ft_0:a", 6), member("torchtitan_ft_1:b", 5))
    lp.refresh(2.0)
    p0 = lp.last_progress(0, 0, 0.0)
    assert p0 is not None and (p0.t, p0.step, p0.source) == (2.0, 6, "lighthouse")
    assert lp.last_progress(1, 0, 0.0) is None  # listed, but its step never moved
    # Group 1 restarts at 3.0. The new process joins the quorum (recovering, step 0): joined, not progressed;
    # the heal from a peer belongs to its start.
    pages.next = status(member("torchtitan_ft_0:a", 9), member("torchtitan_ft_1:c", 0, recovering=True))
    lp.refresh(5.0)
    assert lp.last_progress(1, 1, 3.0) is None
    # Healed: it commits at the peer's step. That is the new attempt's first progress.
    pages.next = status(member("torchtitan_ft_0:a", 10), member("torchtitan_ft_1:c", 10))
    lp.refresh(6.0)
    p1 = lp.last_progress(1, 1, 3.0)
    assert p1 is not None and (p1.t, p1.step) == (6.0, 10)


def test_a_step_of_the_attempt_before_read_after_the_restart_is_not_the_new_attempts() -> None:
    """Regression (CI, local chaos): the killed process's last step change was read one poll after its
    group restarted; counted for the new attempt, which was still healing, it made it look hung."""
    pages = Pages()
    lp = LighthouseProgress(pages)
    pages.next = status(member("g_0:a", 38), member("g_1:old", 38))
    lp.refresh(10.0)
    # Group 1 is killed at 11.6 and restarted at 11.7; the page still shows its old process, one step on.
    pages.next = status(member("g_0:a", 39), member("g_1:old", 39))
    lp.refresh(12.0)
    assert lp.last_progress(1, 1, 11.7) is None
    hang = HangCheck(table((0, 0, 0.0), (1, 1, 11.7)), [lp], hang_timeout_s=5, startup_timeout_s=60)
    pages.next = status(member("g_0:a", 45), member("g_1:old", 39))
    assert hang.observe(17.3) == []  # still starting: startup_timeout_s, not hang_timeout_s
    pages.next = status(member("g_0:a", 46), member("g_1:new", 46))
    lp.refresh(20.0)
    pages.next = status(member("g_0:a", 47), member("g_1:new", 47))
    lp.refresh(20.5)
    p = lp.last_progress(1, 1, 11.7)
    assert p is not None and (p.t, p.step) == (20.5, 47)


def test_heartbeat_files_belong_to_their_attempt_and_the_slowest_rank_counts(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path)
    hb = HeartbeatFiles(tmp_path)
    write_json_atomic(paths.heartbeat(2, 0), {"step": 7, "time": 20.0, "pid": 1, "attempt": 1})
    write_json_atomic(paths.heartbeat(2, 1), {"step": 6, "time": 18.0, "pid": 2, "attempt": 1})
    p = hb.last_progress(2, 1, 10.0)
    assert p is not None and (p.t, p.step) == (18.0, 6)
    assert hb.last_progress(2, 2, 10.0) is None  # another attempt's beats
    # Step 0 is "starting", not progress; a beat without an attempt belongs to the attempt running when written.
    write_json_atomic(paths.heartbeat(3, 0), {"step": 0, "time": 20.0, "pid": 1})
    assert hb.last_progress(3, 0, 10.0) is None
    write_json_atomic(paths.heartbeat(3, 0), {"step": 4, "time": 20.0, "pid": 1})
    assert hb.last_progress(3, 0, 10.0) is not None and hb.last_progress(3, 0, 25.0) is None


def test_hang_uses_startup_timeout_until_progress_then_hang_timeout() -> None:
    pages = Pages()
    lp = LighthouseProgress(pages)
    check = HangCheck(table((0, 0, 0.0), (1, 0, 0.0)), [lp], hang_timeout_s=5.0, startup_timeout_s=60.0)
    pages.next = status(member("0:a", 0))
    assert check.observe(0.0) == []
    pages.next = status(member("0:a", 1))
    assert check.observe(50.0) == []  # group 0 committed at 50.0; group 1 is still starting
    # Group 0 made progress and then none: hung 5 s later, not 60.
    assert [(h.group, h.started) for h in check.observe(55.5)] == [(0, True)]
    pages.next = status(member("0:a", 2))
    assert check.observe(56.0) == []
    hung = check.observe(60.5)
    assert [(h.group, h.started) for h in hung] == [(1, False)]
    assert "since it started (startup_timeout_s 60" in hung[0].reason and "lighthouse" in hung[0].reason


def test_an_unreadable_lighthouse_excuses_silence_until_it_is_read_again() -> None:
    pages = Pages()
    lp = LighthouseProgress(pages)
    check = HangCheck(table((0, 0, 0.0)), [lp], hang_timeout_s=5.0, startup_timeout_s=5.0)
    pages.next = status(member("0:a", 1))
    check.observe(1.0)
    pages.next = status(member("0:a", 2))
    check.observe(2.0)  # progress at 2.0
    pages.next = None
    assert check.observe(30.0) == [] and lp.error and "connection refused" in lp.error
    pages.next = status(member("0:a", 2))
    assert check.observe(34.0) == []  # readable again at 34.0: silence counts from there
    assert [h.group for h in check.observe(39.5)] == [0]


def test_auto_takes_the_latest_of_both_sources(tmp_path: Path) -> None:
    pages = Pages()
    lp = LighthouseProgress(pages)
    sources, warning = progress_sources("auto", tmp_path, lp)
    assert [s.name for s in sources] == ["heartbeat", "lighthouse"] and warning is None
    check = HangCheck(table((0, 0, 0.0)), sources, hang_timeout_s=5.0, startup_timeout_s=100.0)
    pages.next = status(member("0:a", 3))
    check.observe(0.5)
    pages.next = status(member("0:a", 4))
    check.observe(1.0)  # Lighthouse progress at 1.0
    write_json_atomic(RunPaths(tmp_path).heartbeat(0, 0), {"step": 4, "time": 9.0, "pid": 1, "attempt": 0})
    assert check.observe(13.0) == []  # the heartbeat at 9.0 is the latest progress
    assert [h.group for h in check.observe(14.5)] == [0]
    assert progress_sources("off", tmp_path, lp)[0] == []
    only_hb, warning = progress_sources("lighthouse", tmp_path, None)
    assert only_hb == [] and warning and "address is unknown" in warning


def test_group_attempts_is_one_entry_per_group_attempt_from_its_first_process() -> None:
    t = table((0, 1, 5.0), (0, 1, 4.0), (1, 0, 2.0))
    got = sorted((g.group, g.attempt, g.started_at) for g in group_attempts(t))
    assert got == [(0, 1, 4.0), (1, 0, 2.0)]


def test_beat_writes_where_the_supervisor_reads_and_does_nothing_outside_lamplighter(tmp_path: Path) -> None:
    env = {
        "LAMPLIGHTER_RUN_DIR": str(tmp_path),
        "LAMPLIGHTER_REPLICA_ID": "4",
        "RANK": "3",
        "LAMPLIGHTER_ATTEMPT": "2",
    }
    assert beat(12, env=env, now=100.0) is True
    got = HeartbeatFiles(tmp_path).beats(4)
    assert set(got) == {3} and (got[3].step, got[3].time, got[3].attempt) == (12, 100.0, 2)
    assert beat(1, env={}) is False and heartbeat_path({"LAMPLIGHTER_RUN_DIR": "/x"}) is None


def test_heartbeat_module_imports_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, lamplighter.trainer.heartbeat; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_group_at_its_last_step_is_finishing_not_hung() -> None:
    """Regression: groups that reached the target and took >hang_timeout_s to exit were requeued as hung."""
    pages = Pages()
    lp = LighthouseProgress(pages)
    check = HangCheck(table((0, 0, 0.0)), [lp], hang_timeout_s=5.0, startup_timeout_s=60.0, target_step=300)
    pages.next = status(member("0:a", 298))
    check.observe(1.0)
    pages.next = status(member("0:a", 299))  # the last quorum: the trainer now runs step 300 and exits
    check.observe(2.0)
    assert check.observe(30.0) == []
    hung = check.observe(62.5)
    assert [(h.group, h.finishing) for h in hung] == [(0, True)] and "finishing" in hung[0].reason


def test_every_group_silent_at_once_is_a_shared_cause_and_waits_for_the_startup_timeout() -> None:
    pages = Pages()
    lp = LighthouseProgress(pages)
    check = HangCheck(table((0, 0, 0.0), (1, 0, 0.0)), [lp], hang_timeout_s=5.0, startup_timeout_s=60.0)
    pages.next = status(member("0:a", 0), member("1:b", 0))
    check.observe(0.0)
    pages.next = status(member("0:a", 1), member("1:b", 1))
    check.observe(1.0)  # both advanced at 1.0, then neither (a quorum waiting for a restarted peer)
    assert check.observe(30.0) == []  # not two hangs: killing both would lose the weights
    hung = check.observe(61.5)
    assert sorted(h.group for h in hung) == [0, 1] and "every group of the job silent at once" in hung[0].reason
    # One group advancing again: the other's silence is its own, and the hang timeout applies.
    pages.next = status(member("0:a", 2), member("1:b", 1))
    assert [h.group for h in check.observe(62.0)] == [1]  # silent 61 s while its peer advances


def test_a_node_that_holds_one_group_sees_its_peers_on_the_lighthouse() -> None:
    pages = Pages()
    lp = LighthouseProgress(pages)
    check = HangCheck(table((0, 0, 0.0)), [lp], hang_timeout_s=5.0, startup_timeout_s=60.0)  # group 1: elsewhere
    pages.next = status(member("0:a", 0), member("1:b", 0))
    check.observe(0.0)
    pages.next = status(member("0:a", 1), member("1:b", 1))
    check.observe(1.0)
    pages.next = status(member("0:a", 1), member("1:b", 2))
    check.observe(4.0)  # the peer on another node goes on: this group's silence is its own
    assert [h.group for h in check.observe(6.5)] == [0]
    # Alone on its Lighthouse (a one-group job), a group's silence is its own too.
    solo = HangCheck(table((0, 0, 0.0)), [LighthouseProgress(pages)], hang_timeout_s=5.0, startup_timeout_s=60.0)
    pages.next = status(member("0:c", 0))
    solo.observe(0.0)
    pages.next = status(member("0:c", 1))
    solo.observe(1.0)
    assert [h.group for h in solo.observe(6.5)] == [0]
