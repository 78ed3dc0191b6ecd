"""The run report on synthetic step logs: lost steps, hash agreement, fault timings, goodput."""

from __future__ import annotations

import pytest

from lamplighter.report.build import build_report, lost_steps
from lamplighter.report.fault_journal import FaultJournal, FaultRecord
from lamplighter.rundir.steplog import StepRecord


def rec(
    g: int,
    step: int,
    t: float,
    *,
    q: int = 1,
    h: str | None = None,
    healed: str | None = None,
    attempt: int = 0,
    committed: bool = True,
) -> StepRecord:
    return StepRecord(
        t=t,
        replica_id=g,
        step=step,
        committed=committed,
        participants=2,
        quorum_id=q,
        healed_from=healed,
        loss=1.0 / step,
        state_hash=h or f"h{step}",
        attempt=attempt,
        samples=16,
        first_sample=0,
    )


def healthy_run() -> dict[int, list[StepRecord]]:
    """Group 1 is killed at t=10.5, restarted at 11.0 and heals to step 13 at t=13.0; group 0 stalls 1 s."""
    g0 = [rec(0, s, float(s)) for s in range(1, 11)] + [rec(0, s, float(s) + 1.0, q=2) for s in range(11, 16)]
    g1 = [rec(1, s, float(s)) for s in range(1, 11)]
    g1 += [
        rec(1, 13, 13.0, q=3, healed="peer:0", attempt=1),
        rec(1, 14, 14.0, q=3, attempt=1),
        rec(1, 15, 15.0, q=3, attempt=1),
    ]
    g0 = [r if r.step < 13 else rec(0, r.step, r.step * 1.0, q=3) for r in g0]
    return {0: g0, 1: g1}


def test_healthy_run_with_a_heal() -> None:
    j = FaultJournal()
    j.injected(FaultRecord(kind="kill", group=1, planned_at_s=10.0, t_injected=10.5, attempt=0))
    j.detected(1, 0, 10.6, "group 1 killed by SIGKILL")
    j.restarted(1, 11.0)
    j.detected(0, 0, 12.0, "group 0 exit 75")  # nobody injected this one
    rep = build_report(healthy_run(), j.faults, target_steps=15, t_start=0.0, t_end=16.0)
    assert rep["steps_committed"] == 15 and rep["reached_target"]
    assert rep["steps_lost"] == 0 and rep["weights_identical"] and rep["steps_compared"] == 13
    f = rep["faults"][0]
    assert f["t_first_commit_after"] == 13.0
    assert f["detection_latency_s"] == pytest.approx(0.1) and f["recovery_s"] == pytest.approx(2.5)
    # Group 0's gap 10 -> 12 is 2 s against a normal 1 s step.
    assert f["survivor_stall_s"] == pytest.approx(1.0)
    assert rep["faults"][1]["kind"] == "unplanned" and rep["faults"][1]["t_detected"] == 12.0
    assert rep["by_kind"]["kill"]["count"] == 1
    # No fault-free run given: goodput is against this run's steady stretches, none against another run.
    assert rep["goodput_vs_fault_free_run"] is None and rep["fault_free_samples_per_s"] is None


def test_recovery_is_timed_from_the_new_attempts_own_rows() -> None:
    """The Lighthouse's status lags a kill: a row of the killed attempt can come after the restart. Recovery
    is the new attempt's first commit (13.0), not that row (11.2: "first commit 0.2 s after restart")."""
    runs = healthy_run()
    runs[1].insert(10, rec(1, 11, 11.2))  # attempt 0, after the restart at 11.0
    j = FaultJournal()
    j.injected(FaultRecord(kind="kill", group=1, planned_at_s=10.0, t_injected=10.5, attempt=0))
    j.detected(1, 0, 10.6, "group 1 killed by SIGKILL")
    j.restarted(1, 11.0)
    f = build_report(runs, j.faults, target_steps=15, t_start=0.0, t_end=16.0)["faults"][0]
    assert f["t_first_commit_after"] == 13.0 and f["first_commit_after_restart_s"] == pytest.approx(2.0)
    assert f["steps_compared_after"] == 3  # 13, 14, 15 of the new attempt, each also hashed by group 0


def test_a_torchtitan_job_that_ran_its_steps_reached_its_target() -> None:
    """torchtitan counts attempted steps: one failed commit, and its step 15 is torchft's 14. The job ran
    trainer.steps in its own counting, and reads as reached (the report once said "14/15 committed")."""
    from dataclasses import replace

    runs = {
        g: [replace(r, trainer_step=r.step + (1 if r.step >= 9 else 0)) for r in recs if r.step <= 14]
        for g, recs in healthy_run().items()
    }
    rep = build_report(runs, [], target_steps=15, t_start=0.0, t_end=16.0)
    assert rep["steps_committed"] == 14 and rep["trainer_steps"] == 15 and rep["reached_target"]
    short = {g: [r for r in recs if r.step <= 13] for g, recs in runs.items()}
    assert not build_report(short, [], target_steps=15, t_start=0.0, t_end=16.0)["reached_target"]


def test_goodput_counts_each_step_of_the_final_timeline_once() -> None:
    # Two groups commit steps 1..10 at t=1..10, go back to a checkpoint of step 6 (steps 7..10 are
    # redone from t=11 in a new quorum) and end at step 14 at t=18: 14 useful steps, 18 committed.
    runs: dict[int, list[StepRecord]] = {}
    for g in (0, 1):
        runs[g] = [rec(g, s, float(s)) for s in range(1, 11)]
        runs[g] += [rec(g, s, 4.0 + s, q=2, attempt=1) for s in range(7, 15)]
    rep = build_report(runs, [], target_steps=14, t_start=0.0, t_end=18.0, baseline_samples_per_s=32.0)
    # Steps 2..14 after the first commit instant, 2 groups x 16 samples, over 17 s.
    assert rep["useful_samples_per_s"] == pytest.approx(13 * 32 / 17, abs=1e-3)
    assert rep["committed_samples_per_s"] == pytest.approx(17 * 32 / 17, abs=1e-3)
    assert rep["goodput_vs_fault_free_run"] == pytest.approx(13 / 17, abs=1e-3)
    assert rep["fault_free_source"] == "given"
    # The same run without the detour is the fault-free baseline itself: goodput 1, by either yardstick.
    clean = {g: [rec(g, s, float(s)) for s in range(1, 15)] for g in (0, 1)}
    rep = build_report(clean, [], target_steps=14, t_start=0.0, t_end=14.0, baseline_samples_per_s=32.0)
    assert rep["goodput_vs_fault_free_run"] == pytest.approx(1.0) and rep["goodput"] == pytest.approx(1.0)


def test_group_going_back_loses_steps() -> None:
    runs = healthy_run()
    # Group 1 restarted from scratch instead of healing: it commits step 1..3 again.
    runs[1] = runs[1][:10] + [rec(1, s, 20.0 + s, q=9, attempt=1) for s in range(1, 4)]
    assert lost_steps(runs) >= set(range(1, 11))
    rep = build_report(runs, [], target_steps=15, t_start=0.0, t_end=30.0)
    assert rep["steps_lost"] >= 10 and rep["lost_step_numbers"][:3] == [1, 2, 3]


def test_same_step_in_two_quorums_is_lost() -> None:
    runs = {0: [rec(0, 1, 1.0, q=1), rec(0, 2, 2.0, q=1)], 1: [rec(1, 1, 1.0, q=1), rec(1, 2, 2.0, q=5)]}
    assert lost_steps(runs) == {2}


def test_uncommitted_steps_and_heals_are_not_losses() -> None:
    runs = {
        0: [rec(0, 1, 1.0), rec(0, 2, 2.0, committed=False), rec(0, 2, 3.0)],
        1: [rec(1, 1, 1.0), rec(1, 5, 9.0, healed="peer:0")],
    }
    assert lost_steps(runs) == set()


def test_hash_mismatch_is_reported() -> None:
    runs = healthy_run()
    runs[1][-1] = rec(1, 15, 15.0, q=3, h="different", attempt=1)
    rep = build_report(runs, [], target_steps=15, t_start=0.0, t_end=16.0)
    assert rep["weights_identical"] is False
    assert rep["hash_mismatches"] == [{"step": 15, "hashes": {"0": "h15", "1": "different"}}]


def test_too_short_a_run_has_no_goodput_unless_a_fault_free_rate_is_given() -> None:
    runs = {0: [rec(0, s, float(s)) for s in range(1, 4)]}
    fault = FaultRecord(kind="hang", group=0, planned_at_s=1.0, t_injected=1.5, attempt=0)
    rep = build_report(runs, [fault], target_steps=3, t_start=0.0, t_end=4.0)
    assert rep["goodput"] is None and rep["faults"][0]["t_detected"] is None
    assert "0 steady steps" in rep["steady"]["why_none"]
    rep = build_report(runs, [fault], target_steps=3, t_start=0.0, t_end=4.0, baseline_samples_per_s=32.0)
    assert rep["goodput_vs_fault_free_run"] == pytest.approx(0.5) and rep["fault_free_source"] == "given"


def test_a_survivor_down_for_its_own_fault_does_not_count() -> None:
    runs = healthy_run()
    # Group 0 was hung from t=9.5 and restarted: its gap 9 -> 13 belongs to its own fault.
    runs[0] = [r for r in runs[0] if not 9 < r.t < 13]
    runs[0] = [r if r.t < 13 else rec(0, r.step, r.t, q=3, attempt=1) for r in runs[0]]
    own = FaultRecord(kind="hang", group=0, planned_at_s=9.0, t_injected=9.5, attempt=0)
    other = FaultRecord(kind="kill", group=1, planned_at_s=10.0, t_injected=10.5, attempt=0, t_restarted=11.0)
    rep = build_report(runs, [own, other], target_steps=15, t_start=0.0, t_end=16.0)
    assert rep["faults"][1]["survivor_stall_s"] == 0.0  # not the 4 s gap of its own hang


def test_a_heal_with_no_step_compared_after_it_is_not_called_identical() -> None:
    runs = healthy_run()
    # Group 0 ends at step 12: nothing after group 1's heal at step 13 was hashed by both.
    runs[0] = [r for r in runs[0] if r.step <= 12]
    rep = build_report(runs, [], target_steps=15, t_start=0.0, t_end=16.0)
    assert rep["hash_mismatches"] == [] and rep["steps_compared"] == 10
    assert rep["weights_identical"] is None
    assert rep["weights_check"].endswith("no step compared after the heal of group 1 at step 13")
    # One compared step after the heal is enough.
    runs[0].append(rec(0, 14, 14.0, q=3))
    assert build_report(runs, [], target_steps=15, t_start=0.0, t_end=16.0)["weights_identical"] is True


def test_overlapping_faults_on_one_attempt_share_its_detection_and_restart() -> None:
    """An exact schedule may hit a group twice before the first fault was seen: both are accounted for."""
    j = FaultJournal()
    j.injected(FaultRecord(kind="hang", group=1, planned_at_s=10.0, t_injected=10.5, attempt=0, t_planned=10.45))
    j.injected(FaultRecord(kind="kill", group=1, planned_at_s=10.2, t_injected=10.7, attempt=0))
    j.detected(1, 0, 10.8, "group 1 killed by SIGKILL")
    j.restarted(1, 11.0)
    rep = build_report(healthy_run(), j.faults, target_steps=15, t_start=0.0, t_end=16.0)
    hang, kill = rep["faults"]
    assert hang["detection_latency_s"] == pytest.approx(0.3) and kill["detection_latency_s"] == pytest.approx(0.1)
    assert hang["t_first_commit_after"] == kill["t_first_commit_after"] == 13.0
    assert hang["late_s"] == pytest.approx(0.05) and kill["late_s"] is None
    assert [f["kind"] for f in rep["faults"]] == ["hang", "kill"]  # no unplanned record


def test_steps_redone_from_the_fallback_checkpoint_are_counted_apart_from_losses() -> None:
    # Both groups die after step 10; no live peer: group 0 loads the checkpoint of step 6 and group 1
    # heals from it. Steps 7..10 are redone, announced; nothing else went back.
    runs: dict[int, list[StepRecord]] = {}
    for g in (0, 1):
        runs[g] = [rec(g, s, float(s)) for s in range(1, 11)]
    runs[0] += [rec(0, 7, 20.0, q=2, attempt=1, healed="checkpoint:6")]
    runs[1] += [rec(1, 7, 20.0, q=2, attempt=1, healed="peer:0")]
    for g in (0, 1):
        runs[g] += [rec(g, s, 13.0 + s, q=2, attempt=1) for s in range(8, 13)]
    rep = build_report(runs, [], target_steps=12, t_start=0.0, t_end=26.0)
    assert rep["steps_lost"] == 0 and rep["steps_redone_from_fallback"] == 4
    # Without the announcement the same rollback is a loss.
    runs[0][10] = rec(0, 7, 20.0, q=2, attempt=1)
    rep = build_report(runs, [], target_steps=12, t_start=0.0, t_end=26.0)
    assert rep["steps_lost"] == 4 and rep["steps_redone_from_fallback"] == 0


def test_a_redo_from_the_checkpoint_by_a_lone_group_is_neither_lost_nor_a_mismatch() -> None:
    """Found by the soak: three groups commit steps 1..10; all of them die; group 1 alone loads the
    checkpoint of step 6 (its first step after the load does not commit) and redoes 7..10 alone, so with
    other batches and other hashes; group 0 heals from it later. Nothing is lost, nothing disagrees."""
    runs: dict[int, list[StepRecord]] = {g: [rec(g, s, float(s)) for s in range(1, 11)] for g in (0, 1, 2)}
    runs[1] += [rec(1, 6, 20.0, q=7, attempt=1, healed="checkpoint:6", committed=False)]
    runs[1] += [rec(1, s, 14.0 + s, q=9, attempt=1, h=f"alone{s}") for s in range(7, 13)]
    runs[0] += [rec(0, 12, 26.0, q=9, attempt=1, h="alone12", healed="peer:1")]
    rep = build_report(runs, [], target_steps=12, t_start=0.0, t_end=27.0)
    assert rep["steps_redone_from_fallback"] == 4 and rep["steps_lost"] == 0
    assert rep["weights_identical"] is True and rep["hash_mismatches"] == []


def test_a_redo_under_a_reused_quorum_id_is_still_a_redo() -> None:
    """Found by the soak: after a Lighthouse restart quorum ids start again at 1, so the redo of step 9
    from the checkpoint of step 8 got the same quorum id as the rolled-back commit of step 9."""
    runs: dict[int, list[StepRecord]] = {g: [rec(g, s, float(s), q=6) for s in range(1, 10)] for g in (0, 1)}
    runs[1] += [rec(1, 9, 30.0, q=6, attempt=1, healed="checkpoint:8", h="redo9")]
    runs[1] += [rec(1, 10, 31.0, q=7, attempt=1, h="redo10")]
    runs[0] += [rec(0, 10, 31.0, q=7, attempt=1, h="redo10", healed="peer:1")]
    rep = build_report(runs, [], target_steps=10, t_start=0.0, t_end=33.0)
    assert rep["steps_lost"] == 0 and rep["steps_redone_from_fallback"] == 1
    assert rep["weights_identical"] is True, rep["hash_mismatches"]


def test_a_stall_started_by_the_next_fault_is_that_faults() -> None:
    """Found in `make demo-bare`: a hang struck 0.06 s after the killed group's first commit, and the survivors'
    2 s stall it caused was counted for the kill too, since their last commit before it fell in the kill's window."""
    runs = {
        0: [rec(0, s, float(s)) for s in range(1, 11)] + [rec(0, 11, 12.0), rec(0, 12, 13.0), rec(0, 13, 16.0)],
        1: [rec(1, s, float(s)) for s in range(1, 11)] + [rec(1, 12, 13.0, attempt=1), rec(1, 13, 16.0, attempt=1)],
        2: [rec(2, s, float(s)) for s in range(1, 14)] + [rec(2, 14, 17.0, attempt=1)],
    }
    kill = FaultRecord(kind="kill", group=1, planned_at_s=10.0, t_injected=10.5, attempt=0, t_restarted=11.0)
    hang = FaultRecord(kind="hang", group=2, planned_at_s=13.0, t_injected=13.05, attempt=0, t_restarted=15.0)
    rep = build_report(runs, [kill, hang], target_steps=13, t_start=0.0, t_end=17.0)
    # The kill: group 0's 10 -> 12 gap (1 s over its step); the hang: the 13 -> 16 gap (2 s over).
    assert [f["survivor_stall_s"] for f in rep["faults"]] == [1.0, 2.0]


def test_the_target_is_the_owners_stop_step_when_it_told_the_job_to_stop_early() -> None:
    """A job trained "until told" (trainer.steps far out, then a stop-at file) reached the step it was told."""
    rep = build_report(healthy_run(), [], target_steps=1_000_000, t_start=0.0, t_end=16.0, stop_at=15)
    assert rep["target_steps"] == 15 and rep["reached_target"]
    assert (rep["configured_steps"], rep["stop_at"]) == (1_000_000, 15)
    short = build_report(healthy_run(), [], target_steps=1_000_000, t_start=0.0, t_end=16.0, stop_at=20)
    assert short["target_steps"] == 20 and not short["reached_target"]
    plain = build_report(healthy_run(), [], target_steps=15, t_start=0.0, t_end=16.0)
    assert plain["target_steps"] == 15 and plain["stop_at"] is None and plain["reached_target"]


def test_a_restart_in_place_under_the_same_attempt_is_timed_from_its_next_commit() -> None:
    """A bare-metal host restarts a group in place within its lease epoch: the attempt number stays. Its rows
    after the restart are the new process's, and the fault is recovered (demo-bare's kill and hang)."""
    runs = healthy_run()
    runs[1] = [r if r.t < 11 else rec(1, r.step, r.t, q=3, healed=r.healed_from, attempt=0) for r in runs[1]]
    j = FaultJournal()
    j.injected(FaultRecord(kind="kill", group=1, planned_at_s=10.0, t_injected=10.5, attempt=0))
    j.detected(1, 0, 10.6, "group 1 killed by SIGKILL")
    j.restarted(1, 11.0)
    f = build_report(runs, j.faults, target_steps=15, t_start=0.0, t_end=16.0)["faults"][0]
    assert f["t_first_commit_after"] == 13.0


def test_an_in_place_restart_is_not_timed_by_the_new_attempt_a_later_fault_brought() -> None:
    """demo-bare: a kill restarts group 1 in place (same attempt); a later host crash moves it (a new attempt).
    The kill's recovery is the in-place process's first commit, not the moved group's."""
    runs = healthy_run()
    same = [r if r.t < 11 else rec(1, r.step, r.t, q=3, attempt=0) for r in runs[1]]
    runs[1] = same + [rec(1, 20, 20.0, q=4, healed="peer:0", attempt=1), rec(1, 21, 21.0, q=4, attempt=1)]
    j = FaultJournal()
    j.injected(FaultRecord(kind="kill", group=1, planned_at_s=10.0, t_injected=10.5, attempt=0))
    j.detected(1, 0, 10.6, "killed")
    j.restarted(1, 11.0)
    j.injected(FaultRecord(kind="node-crash", group=1, planned_at_s=17.0, t_injected=17.0, attempt=0))
    j.detected(1, 0, 17.5, "host crashed")
    j.restarted(1, 18.0)
    kill, crash = build_report(runs, j.faults, target_steps=21, t_start=0.0, t_end=22.0)["faults"]
    assert kill["t_first_commit_after"] == 13.0 and crash["t_first_commit_after"] == 20.0
