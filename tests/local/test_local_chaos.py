"""`lamplighter local` end to end: a real Lighthouse, real trainer processes, one fault of each kind."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from realparts import FAR_STEPS, STEP_SLEEP_S, stop_once_all_commit_after, stop_when

from lamplighter.commands.local import add_parser, run_local
from lamplighter.rundir.steplog import StepRecord

JOB = """
name: chaos-all
trainer:
  steps: {steps}
  model: {{dim: 64, layers: 2, heads: 4, seq_len: 32, batch_size: 16, step_sleep_s: {step_sleep_s}}}
  checkpoint: {{enabled: false}}
groups: {{count: 3}}
lighthouse: {{port: 0, min_replicas: 1, quorum_tick_ms: 20, join_timeout_ms: 1000, heartbeat_timeout_ms: 500}}
torchft: {{pg_timeout_s: 2, timeout_s: 3, quorum_timeout_s: 4, connect_timeout_s: 10}}
health: {{hang_timeout_s: 5, poll_interval_s: 0.5}}
restart: {{budget_per_group: 5, backoff_initial_s: 0}}
"""

# The first two faults are exact (the schedule's mode): the second kill hits group 1 while it is still restarting
# from the first. The rest are gentle: each waits until its target has healed and another healthy group is left
# to heal it from, so a loaded machine (a restart slower than the schedule's gaps) cannot take every group's
# state at once, which no supervisor could heal. Group 1 blocks inside a step (heartbeats going on) in its
# fourth attempt.
SCHEDULE = """
- {at_s: 3, kind: kill, group: 1}
- {at_s: 4, kind: kill, group: 1}
- {at_s: 11, kind: exception, group: 2, mode: gentle}
- {at_s: 18, kind: hang, group: 0, mode: gentle}
- {at_s: 22, kind: hang-collective, group: 1, mode: gentle}
- {at_s: 34, kind: lighthouse-kill, mode: gentle}
"""
# The attempt each group reaches through the schedule's faults.
LAST_ATTEMPT = {0: 1, 1: 3, 2: 1}


def _all_healed(recs: list[list[StepRecord]]) -> bool:
    """Every group committed in its last attempt, then every group committed in the restarted Lighthouse's
    quorums: its quorum ids start again below the ones its last life gave out (the groups' own records say so)."""
    if not all(any(r.attempt >= LAST_ATTEMPT[g] for r in rs) for g, rs in enumerate(recs)):
        return False
    max_before, t_restart = 0, None
    for r in sorted((r for rs in recs for r in rs), key=lambda r: r.t):
        if r.quorum_id < max_before:
            t_restart = r.t
            break
        max_before = max(max_before, r.quorum_id)
    return t_restart is not None and all(any(r.t >= t_restart for r in rs) for rs in recs)


def _log_tails(run_dir: Path, lines: int = 12) -> None:
    """What each process of the run said last (pytest shows it when the test fails)."""
    for log in sorted((run_dir / "logs").glob("*.log")):
        print(f"--- {log.name}")
        print("\n".join(log.read_text(errors="replace").splitlines()[-lines:]))


def _args(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers())
    return ap.parse_args(["local", *argv])


@pytest.mark.integration
@pytest.mark.heavy(seconds=47)
def test_every_fault_kind_heals_with_nothing_lost(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text(JOB.format(steps=FAR_STEPS, step_sleep_s=STEP_SLEEP_S))
    (tmp_path / "chaos.yaml").write_text(SCHEDULE)
    stop_when(tmp_path / "run", 3, _all_healed)
    rc = run_local(
        _args(
            str(tmp_path / "job.yaml"),
            "--chaos",
            f"@{tmp_path / 'chaos.yaml'}",
            "--run-dir",
            str(tmp_path / "run"),
            "--report",
            str(tmp_path / "report"),
            "--no-live",
        )
    )
    _log_tails(tmp_path / "run")
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    summary = json.dumps(
        [{k: f[k] for k in ("kind", "group", "attempt", "detected_as", "late_s")} for f in report["faults"]],
        indent=1,
    )
    print(summary)
    kinds = [f["kind"] for f in report["faults"]]
    assert kinds == ["kill", "kill", "exception", "hang", "hang-collective", "lighthouse-kill"], summary
    first_kill, second_kill = report["faults"][:2]
    # The second kill did not wait for a healthy target: it hit the restarted attempt before its first commit.
    assert (first_kill["attempt"], second_kill["attempt"]) == (0, 1), summary
    assert second_kill["t_injected"] < first_kill["t_first_commit_after"], summary
    assert report["chaos_mode"] == "exact" and report["chaos_missed"] == []
    faults = {f["kind"]: f for f in report["faults"][1:]}
    for kind, f in faults.items():
        assert f["t_injected"] and f["t_detected"] and f["t_detected"] >= f["t_injected"], (kind, summary)
        assert f["t_restarted"] and f["t_first_commit_after"] and f["t_first_commit_after"] > f["t_restarted"], (
            kind,
            summary,
        )
    assert "SIGKILL" in faults["kill"]["detected_as"]
    assert "exit 75" in faults["exception"]["detected_as"]
    assert "hung" in faults["hang"]["detected_as"]
    # Its heartbeats went on, so only the lack of progress gave the blocked group away.
    assert "hung" in faults["hang-collective"]["detected_as"]
    assert faults["lighthouse-kill"]["group"] is None
    # The groups rode through the Lighthouse restart: nothing else failed.
    assert [f for f in report["faults"] if f["kind"] == "unplanned"] == [], summary
    assert report["steps_lost"] == 0
    # Compared over many steps, not a handful; the run is paced by time, and a loaded machine commits fewer
    # (100 exactly with the suite's other worker under load).
    assert report["weights_identical"] and report["steps_compared"] > 50
    assert report["reached_target"] and rc == 0
    # Healing happened: each restarted group took its state from a live peer.
    assert all(report["groups"][g]["heals"] >= 1 for g in ("0", "1", "2"))
    assert (tmp_path / "report" / "timeline.png").stat().st_size > 10_000


@pytest.mark.integration
@pytest.mark.heavy(seconds=20)
def test_a_survivor_trains_alone_while_most_groups_restart(tmp_path: Path) -> None:
    """Two of three groups killed at the same instant (#16): the survivor trains alone while they restart.

    The dead groups must not hold the survivor once torchft's Lighthouse stops counting them
    (heartbeat_timeout_ms): it forms quorums of 1 and commits. The restarts wait 4 s
    (restart.backoff_initial_s), longer than the survivor's worst wait for a member that died
    inside a formed quorum (torchft.pg_timeout_s, 2 s here; that wait is #16's open stall and
    is measured by lab/simultaneous.py, not here). Without the wait, a CI run saw the restarted
    groups back before the survivor's 2 s ran out, and nothing could be asserted. Asserted
    without timing: a commit of the survivor alone after the kills, before either restarted
    group's first commit."""
    from lamplighter.rundir.contract import RunPaths
    from lamplighter.rundir.steplog import read_steps

    job = JOB.format(steps=FAR_STEPS, step_sleep_s=STEP_SLEEP_S).replace("backoff_initial_s: 0", "backoff_initial_s: 4")
    assert "backoff_initial_s: 4" in job
    (tmp_path / "job.yaml").write_text(job)
    (tmp_path / "chaos.yaml").write_text("- {at_s: 3, kind: kill, group: 1}\n- {at_s: 3, kind: kill, group: 2}\n")
    run_dir = tmp_path / "run"
    # Killed at 3 s and restarted 4 s later: every group committing at 10 s means both came back.
    stop_once_all_commit_after(run_dir, 3, after_s=10.0)
    rc = run_local(
        _args(
            str(tmp_path / "job.yaml"),
            "--chaos",
            f"@{tmp_path / 'chaos.yaml'}",
            "--run-dir",
            str(run_dir),
            "--report",
            str(tmp_path / "report"),
            "--no-live",
        )
    )
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert rc == 0 and report["steps_lost"] == 0 and report["weights_identical"]
    kills = [f["t_injected"] for f in report["faults"] if f["kind"] == "kill"]
    assert len(kills) == 2
    paths = RunPaths(run_dir)
    back = min(r.t for g in (1, 2) for r in read_steps(paths.steps(g)) if r.committed and r.attempt == 1)
    alone = [r for r in read_steps(paths.steps(0)) if r.committed and max(kills) < r.t < back]
    assert any(r.participants == 1 for r in alone), [(r.step, r.participants) for r in alone]


def test_bad_chaos_spec_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "job.yaml").write_text(JOB.format(steps=5, step_sleep_s=0))
    rc = run_local(_args(str(tmp_path / "job.yaml"), "--chaos", "mtbf=soon", "--run-dir", str(tmp_path / "run")))
    assert rc == 2 and "not a duration" in capsys.readouterr().err


def test_unsupported_kind_in_local_mode_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "job.yaml").write_text(JOB.format(steps=5, step_sleep_s=0))
    rc = run_local(
        _args(str(tmp_path / "job.yaml"), "--chaos", "mtbf=5s,kinds=gpu", "--run-dir", str(tmp_path / "run"))
    )
    assert rc == 2 and "cannot be injected in local mode" in capsys.readouterr().err


def test_previous_run_in_run_dir_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "job.yaml").write_text(JOB.format(steps=5, step_sleep_s=0))
    (tmp_path / "run" / "steps").mkdir(parents=True)
    rc = run_local(_args(str(tmp_path / "job.yaml"), "--run-dir", str(tmp_path / "run"), "--no-live"))
    assert rc == 2 and "previous run" in capsys.readouterr().err


def test_invalid_config_is_exit_2_with_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "job.yaml").write_text("name: x\ngroups: {cout: 2}\n")
    rc = run_local(_args(str(tmp_path / "job.yaml"), "--run-dir", str(tmp_path / "run")))
    err = capsys.readouterr().err
    assert rc == 2 and f"{tmp_path / 'job.yaml'}:2: groups.cout: unknown key 'cout'" in err
    assert not (tmp_path / "run").exists()  # nothing started
