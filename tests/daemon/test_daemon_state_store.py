from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lamplighter.rundir.actions import ActionLog
from lamplighter.slurm.parsers import JobInfo
from lamplighter.supervisor.executor import Executor
from lamplighter.supervisor.recovery import COMPLETED, CONFIRMED, recover_pending
from lamplighter.supervisor.state_journal import Journal, JournalError, read_journal
from lamplighter.supervisor.state_store import FORMAT_VERSION, JOURNAL, SNAPSHOT, DaemonState, PendingAction, StateError

CHILD = Path(__file__).with_name("daemon_state_child.py")


def test_round_trip(tmp_path: Path) -> None:
    s = DaemonState.load(tmp_path)
    a = s.record_intent(1.0, "drain", "n1", "ecc", {"gpu": 0, "ecc": 3})
    b = s.record_intent(2.0, "requeue", "77", "exit 1", before={"restarts": 0}, restart_group="job/0")
    s.record_done(3.0, a.id, "ok")
    assert s.bump_restart(4.0, "job/0") == 2
    s.set_baseline(5.0, "gpu0", {"ecc": 7})
    s.record_event(6.0, "fault", {"kind": "ecc"})
    s.close()
    s = DaemonState.load(tmp_path)
    assert [p.id for p in s.pending()] == [b.id]
    assert s.pending()[0] == b
    assert s.restarts("job/0") == 2 and s.restarts("other") == 0
    assert s.baselines() == {"gpu0": {"ecc": 7}}
    assert s.drains() == [(1.0, "n1")]
    assert [e.get("kind") for e in s.events() if e["type"] == "event"] == ["fault"]
    with pytest.raises(StateError, match="no pending action"):
        s.record_done(7.0, a.id, "ok")  # done twice: a bug in the caller, not a silent no-op
    s.close()


def test_compaction_keeps_everything_and_ids_stay_unique(tmp_path: Path) -> None:
    s = DaemonState.load(tmp_path, compact_every=3)
    ids = [s.record_intent(float(i), "kill", f"p{i}", "hang", restart_group="g").id for i in range(10)]
    assert len(set(ids)) == 10
    s.close()
    assert len(read_journal(tmp_path / JOURNAL).records) < 3  # it was compacted
    s = DaemonState.load(tmp_path)
    assert s.restarts("g") == 10 and len(s.pending()) == 10
    assert s.record_intent(11.0, "kill", "p", "x").id not in ids
    s.close()


def test_crash_between_snapshot_and_journal_reset_applies_nothing_twice(tmp_path: Path) -> None:
    s = DaemonState.load(tmp_path)
    for i in range(5):
        s.bump_restart(float(i), "g")
    old = (tmp_path / JOURNAL).read_bytes()
    s.save()
    s.close()
    (tmp_path / JOURNAL).write_bytes(old)  # as if killed right after the snapshot's rename
    s = DaemonState.load(tmp_path)
    assert s.restarts("g") == 5
    s.bump_restart(9.0, "g")
    s.close()
    assert DaemonState.load(tmp_path).restarts("g") == 6


def test_torn_last_line_is_cut_off_before_appending(tmp_path: Path) -> None:
    s = DaemonState.load(tmp_path)
    s.bump_restart(1.0, "g")
    s.close()
    with open(tmp_path / JOURNAL, "ab") as f:
        f.write(b'{"seq":2,"type":"restart","gro')
    s = DaemonState.load(tmp_path)
    assert s.restarts("g") == 1
    s.bump_restart(2.0, "g")
    s.close()
    contents = read_journal(tmp_path / JOURNAL)
    assert contents.torn_bytes == 0 and [r["seq"] for r in contents.records] == [1, 2]
    assert DaemonState.load(tmp_path).restarts("g") == 2


def test_damage_in_the_middle_is_an_error_naming_the_line(tmp_path: Path) -> None:
    j, _ = Journal.open(tmp_path / "j.jsonl")
    j.append({"type": "event"})
    j.close()
    with open(tmp_path / "j.jsonl", "ab") as f:
        f.write(b"garbage\n")
    with pytest.raises(JournalError, match=r"j\.jsonl: line 2"):
        read_journal(tmp_path / "j.jsonl")


def test_one_daemon_per_state_dir(tmp_path: Path) -> None:
    s = DaemonState.load(tmp_path)
    with pytest.raises(StateError, match="another daemon"):
        DaemonState.load(tmp_path)
    s.close()
    DaemonState.load(tmp_path).close()


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, text=True)


def _kill(proc: subprocess.Popen[str]) -> list[str]:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.stdout is not None
    # Read through the file object: communicate(timeout=...) reads the pipe's fd directly and drops
    # what readline() had already buffered, acknowledged lines the check then missed (a flaky +2).
    rest = proc.stdout.read()
    proc.wait(timeout=30)
    return rest.splitlines()


@pytest.mark.parametrize("kill_after", [1, 4, 11, 29, 64])
def test_sigkill_while_writing_loses_nothing_acknowledged(tmp_path: Path, kill_after: int) -> None:
    proc = _start("churn", str(tmp_path))
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(kill_after)]
    lines += _kill(proc)  # the child kept writing while we read: the kill lands anywhere
    assert proc.returncode == -signal.SIGKILL
    intents: dict[str, str] = {}
    done: set[str] = set()
    acked: dict[str, int] = {}
    last_baseline: dict[str, int] = {}
    for line in lines:
        word, *rest = line.split()
        if word == "intent":
            intents[rest[0]] = rest[1]
            acked[rest[1]] = acked.get(rest[1], 0) + 1
        elif word == "done":
            done.add(rest[0])
        elif word == "bump":
            acked[rest[0]] = acked.get(rest[0], 0) + 1
        elif word == "baseline":
            last_baseline[rest[0]] = int(rest[1])

    s = DaemonState.load(tmp_path)
    pending = {p.id for p in s.pending()}
    assert not pending & done
    assert len(pending - set(intents)) <= 1  # at most the one intent in flight
    assert len(set(intents) - done - pending) <= 1  # at most the one done in flight
    counts = s.restart_counts()
    for group, n in acked.items():
        assert n <= counts[group] <= n + 1, (group, counts, acked)
    assert sum(counts.values()) <= sum(acked.values()) + 1
    for gpu, value in last_baseline.items():
        assert s.baselines()[gpu]["ecc"] in (value, value + 2)  # this one, or the next one in flight
    # And it goes on working after the crash.
    s.bump_restart(1e6, "g0")
    s.close()
    assert DaemonState.load(tmp_path).restarts("g0") == counts.get("g0", 0) + 1


class WorldSlurm:
    """Slurm as the executor's `happened` check sees it: job 4242, pending, its Restarts=N in the world file."""

    def __init__(self, world: Path) -> None:
        self.world = world

    def job(self, job_id: int) -> JobInfo:
        assert job_id == 4242
        restarts = int(self.world.read_text())
        return JobInfo(job_id, "job-g1", "PENDING", "BeginTime", restarts, None, None, None, True, None)

    def start_now(self, job_id: int, timeout: float = 15.0) -> None:
        pass  # lifting BeginTime after a requeue: no change to Restarts


@pytest.mark.parametrize("stop_after,expected,redone", [("acted", CONFIRMED, 0), ("intent", COMPLETED, 1)])
def test_sigkill_in_the_middle_of_a_requeue(tmp_path: Path, stop_after: str, expected: str, redone: int) -> None:
    world = tmp_path / "slurm_restarts"  # stands in for Slurm's Restarts=N of the job
    world.write_text("3")
    state_dir = tmp_path / "state"
    proc = _start("requeue", str(state_dir), str(world), stop_after)
    assert proc.stdout is not None
    word, action_id = proc.stdout.readline().split()
    assert word == stop_after
    _kill(proc)

    s = DaemonState.load(state_dir)
    assert [p.id for p in s.pending()] == [action_id]
    assert s.restarts("job/1") == 1
    requeues: list[PendingAction] = []
    # The daemon's own check of whether the requeue happened before the kill.
    happened = Executor(s, WorldSlurm(world), None, ActionLog("n1", lambda line: None)).happened  # type: ignore[arg-type]

    def redo(action: PendingAction) -> dict[str, int]:
        requeues.append(action)
        world.write_text(str(int(world.read_text()) + 1))
        return {"restarts": int(world.read_text())}

    out = recover_pending(s, 10.0, happened, redo)
    assert [(r.action.id, r.outcome) for r in out] == [(action_id, expected)]
    assert len(requeues) == redone
    assert world.read_text() == "4"  # requeued exactly once, whichever side of the kill
    assert s.restarts("job/1") == 1  # the budget counted it once
    s.close()
    s = DaemonState.load(state_dir)
    assert s.pending() == [] and s.restarts("job/1") == 1
    assert recover_pending(s, 11.0, happened, redo) == []
    s.close()


def test_recovery_failure_is_journaled_not_retried_blindly(tmp_path: Path) -> None:
    s = DaemonState.load(tmp_path)
    a = s.record_intent(1.0, "drain", "n3", "ecc")

    def boom(action: PendingAction) -> None:
        raise RuntimeError("scontrol: slurmctld unreachable")

    out = recover_pending(s, 2.0, lambda action: False, boom)
    assert out[0].outcome == "failed" and "unreachable" in out[0].detail["error"]
    assert s.pending() == [] and s.drains() == []  # a failed drain does not count against the limit
    assert any(e.get("id") == a.id and e.get("outcome") == "failed" for e in s.events())
    s.close()


def test_state_dir_created_private(tmp_path: Path) -> None:
    d = tmp_path / "a" / "state"
    DaemonState.load(d).close()
    assert (d.stat().st_mode & 0o777) & ~0o750 == 0
    shutil.rmtree(d)


def test_drain_history_counts_done_drains_and_mark_downs_only(tmp_path: Path) -> None:
    s = DaemonState.load(tmp_path)
    for t, kind, node, outcome in [
        (1.0, "drain", "n1", "ok"),
        (2.0, "mark_down", "n2", "confirmed"),
        (3.0, "drain", "n3", "failed"),
        (4.0, "requeue", "77", "ok"),
    ]:
        s.record_done(t + 0.5, s.record_intent(t, kind, node, "why").id, outcome)
    s.record_intent(5.0, "drain", "n4", "still pending")
    assert s.drain_history() == [(1.0, "n1"), (2.0, "n2")]
    s.set_policy(6.0, "auto_resume", {"held": True})
    assert s.policy_entry("auto_resume") == {"held": True} and s.policy_entry("nothing") is None
    s.close()


def test_an_older_daemon_refuses_a_newer_state_and_says_how_to_roll_back(tmp_path: Path) -> None:
    """Rollback (deploy/README.md): a daemon meets a state a newer lamplighter wrote, a snapshot of a later
    version or a journal record it does not know. It refuses (it would forget budgets it cannot read) with one
    StateError, which `supervise` prints as one line, naming the file and what to do."""
    d = tmp_path / "state"
    s = DaemonState.load(d)
    s.bump_restart(1.0, "job/g0")
    s.save()
    s.close()
    snapshot = json.loads((d / SNAPSHOT).read_text())
    (d / SNAPSHOT).write_text(json.dumps({**snapshot, "version": FORMAT_VERSION + 1}))
    with pytest.raises(StateError, match=r"version 2, written by a newer lamplighter.*move the state directory away"):
        DaemonState.load(d)

    (d / SNAPSHOT).write_text(json.dumps(snapshot))
    line = {"seq": snapshot["seq"] + 1, "type": "quarantine", "node": "n1"}
    with (d / JOURNAL).open("a") as f:
        f.write(json.dumps(line) + "\n")
    with pytest.raises(StateError, match=r"unknown journal record type 'quarantine'.*reinstall the version"):
        DaemonState.load(d)
    # Moved away, as the message says: the daemon starts empty.
    (d / JOURNAL).rename(tmp_path / "journal.old")
    (d / SNAPSHOT).rename(tmp_path / "state.old")
    assert DaemonState.load(d).restarts("job/g0") == 0


@pytest.mark.parametrize("observe", [False, True])
def test_a_daemon_restarted_in_observe_mode_does_not_redo_what_its_predecessor_left(
    tmp_path: Path, observe: bool
) -> None:
    """Found in the #47 restructure, when the executor got its observe flag at build time: recovery ran before
    the loop set it, so a daemon restarted with `mode: observe` requeued what an acting predecessor had only
    intended. Observing, the intent is said (`observed`) and dropped; acting, it is done."""
    from lamplighter.lab.fake_slurm import FakeSlurm

    slurm = FakeSlurm(["n1", "n2"])
    script = tmp_path / "g0.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=ll-demo-g0\n")
    job = slurm.submit(script)
    s = DaemonState.load(tmp_path / "state")
    s.record_intent(1.0, "requeue", str(job), "exit 1", before={"restarts": 0}, restart_group="demo/0")
    lines: list[str] = []
    ex = Executor(s, slurm, None, ActionLog("n1", lines.append), observe=observe)
    [r] = ex.recover(2.0)
    assert s.pending() == []
    if observe:
        assert r.outcome == "observed" and slurm.job(job).restarts == 0
        assert json.loads(lines[0])["outcome"] == "observed"
    else:
        assert r.outcome == COMPLETED and slurm.job(job).restarts == 1
    s.close()
