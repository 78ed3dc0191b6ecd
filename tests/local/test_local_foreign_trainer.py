"""`lamplighter local` supervising a torchft trainer it did not write (tests/foreign/ft_trainer.py).

The trainer uses torchft's Manager directly and writes none of lamplighter's
files: its progress is read from the Lighthouse. It must never be taken for
hung while it commits steps, a kill and a hang must each be recovered once,
and a restarted group must heal from its peer bit-identically (checked on
the hashes the trainer logs in its own format, which lamplighter never reads).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import pytest
from realparts import FAR_STEPS, STEP_SLEEP_S

from lamplighter.commands.local import add_parser, run_local
from lamplighter.rundir.stop_at import write_stop_at

FT_TRAINER = Path(__file__).parent.parent / "foreign" / "ft_trainer.py"

JOB = """
name: foreign
trainer:
  steps: {far}  # the test ends the run (the trainer's own target file) once both faults are recovered
  # As torchft's examples run it: under torchrun (which hosts the group's store), one agent per group.
  command: ["{{python}}", "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc_per_node=1",
            "{trainer}", "--group", "{{replica_id}}", "--steps", "{{steps}}", "--out", "{{run_dir}}/own",
            "--step-sleep", "{step_sleep}", "--pg-timeout", "2", "--target-file", "{{run_dir}}/own/target" {extra}]
groups: {{count: 2}}
lighthouse: {{min_replicas: 1, quorum_tick_ms: 20, join_timeout_ms: 1000, heartbeat_timeout_ms: 500}}
torchft: {{pg_timeout_s: 2, timeout_s: 3, quorum_timeout_s: 4, connect_timeout_s: 10}}
health: {{progress: {progress}, hang_timeout_s: 10, startup_timeout_s: 90, poll_interval_s: 0.5}}
restart: {{budget_per_group: 3, backoff_initial_s: 0, standby: {standby}}}
"""

# Gentle: each fault waits until its target and the other group both commit in their current attempts, so the
# hang never strikes the only group holding the state while the killed one is still restarting (on a busy
# machine a restart under torchrun can take longer than the 9 s between the two), which would leave the
# restarted group no peer to heal from.
SCHEDULE = """
mode: gentle
schedule:
  - {at_s: 3, kind: kill, group: 1}
  - {at_s: 12, kind: hang, group: 0}
"""


def end_once_recovered(run_dir: Path) -> list[int]:
    """In the background: once both groups were restarted (two starts each in their logs) and both commit again,
    past the last restart, end the run a little ahead (the trainer's target file, and stop-at for the report).
    Returns a list that holds the end step once written."""
    end: list[int] = []

    def starts(g: int) -> int:
        log = run_dir / "logs" / f"group{g}.log"
        return log.read_text(errors="replace").count("] started, world") if log.exists() else 0

    def last(g: int) -> int:
        return max((s for s, h in own_hashes(run_dir).items() if g in h), default=0)

    def watch() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and min(starts(0), starts(1)) < 2:
            time.sleep(0.2)
        since = max(last(0), last(1))
        while time.monotonic() < deadline and min(last(0), last(1)) < since + 20:
            time.sleep(0.2)
        end.append(max(last(0), last(1)) + 20)
        (run_dir / "own" / "target").write_text(str(end[0]))
        write_stop_at(run_dir, end[0])

    threading.Thread(target=watch, name="end-once-recovered", daemon=True).start()
    return end


def own_hashes(run_dir: Path) -> dict[int, dict[int, str]]:
    """step -> group -> state hash, from the trainer's own logs (rank 0 of each group)."""
    out: dict[int, dict[int, str]] = {}
    for path in sorted((run_dir / "own").glob("g*.r0.jsonl")):
        group = int(path.name[1 : path.name.index(".")])
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            out.setdefault(rec["step"], {})[group] = rec["hash"]
    return out


@pytest.mark.integration
@pytest.mark.parametrize(
    ("progress", "extra", "standby"), [("lighthouse", "", 0), ("heartbeat", ', "--lamplighter-heartbeat"', 1)]
)
@pytest.mark.heavy(seconds=45)
def test_a_foreign_torchft_trainer_is_supervised_by_its_progress(
    tmp_path: Path, progress: str, extra: str, standby: int
) -> None:
    # With a standby, its process becomes the restarted group's torchrun (`python -m torch.distributed.run`).
    (tmp_path / "job.yaml").write_text(
        JOB.format(
            trainer=FT_TRAINER,
            progress=progress,
            extra=extra,
            standby=standby,
            far=FAR_STEPS,
            step_sleep=STEP_SLEEP_S,
        )
    )
    (tmp_path / "chaos.yaml").write_text(SCHEDULE)
    run_dir = tmp_path / "run"
    end = end_once_recovered(run_dir)
    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers())
    rc = run_local(
        ap.parse_args(
            ["local", str(tmp_path / "job.yaml"), "--chaos", f"@{tmp_path / 'chaos.yaml'}", "--run-dir", str(run_dir)]
            + ["--report", str(tmp_path / "report"), "--no-live"]
        )
    )
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    faults = report["faults"]
    summary = json.dumps([{k: f.get(k) for k in ("kind", "group", "detected_as")} for f in faults], indent=1)
    # Exactly the two injected faults: the groups were never killed while they made progress.
    assert sorted(f["kind"] for f in faults) == ["hang", "kill"], summary
    hang = next(f for f in faults if f["kind"] == "hang")
    assert "hung: no progress" in hang["detected_as"] and progress in hang["detected_as"], summary
    # The silence is counted from the last progress seen, which can precede the SIGSTOP by one poll (0.5 s).
    assert 10.0 - 0.5 <= hang["detection_latency_s"] < 14.0, summary
    for f in faults:
        assert f["t_first_commit_after"] and f["t_first_commit_after"] > f["t_restarted"], summary
    assert [f["warm"] for f in faults] == [bool(standby)] * 2, summary
    # The report reads progress from the Lighthouse and does not claim what it could not check.
    assert report["steps_source"].startswith("the Lighthouse")
    assert report["weights_identical"] is None and report["weights_check"].startswith("not checked")
    assert report["steps_lost"] == 0 and report["reached_target"] and rc == 0
    assert all(s["status"] == "done" for s in report["group_status"].values())
    # Healing, checked on the trainer's own hashes: every step both groups committed agrees.
    hashes = own_hashes(run_dir)
    both = {s: h for s, h in hashes.items() if len(h) == 2}
    assert all(h[0] == h[1] for h in both.values())
    # Both groups were back and in step at the end: each heal left the restarted group identical to its peer.
    assert end and len(both) >= 20 and max(both) == end[0]
    assert max(hashes) == end[0]
    if progress == "heartbeat":
        assert (run_dir / "heartbeat").is_dir()
    else:
        assert not (run_dir / "heartbeat").exists()  # lighthouse: the trainer wrote nothing of lamplighter's


def test_the_foreign_trainer_does_not_import_lamplighter() -> None:
    text = FT_TRAINER.read_text()
    imports = [
        line for line in text.splitlines() if line.strip().startswith(("import", "from")) and "lamplighter" in line
    ]
    # Its one lamplighter import is the optional heartbeat API, behind --lamplighter-heartbeat.
    assert imports == ["        from lamplighter.trainer.heartbeat import beat"], imports


def test_run_dir_placeholder_is_the_runs_own_directory(tmp_path: Path) -> None:
    """Regression: {run_dir} rendered the config's default (runs/<name>, relative) instead of --run-dir."""
    from lamplighter.configs.schema import ChaosConfig, JobConfig
    from lamplighter.launch.group import group_launch
    from lamplighter.local.run import LocalOptions, LocalRun

    job = JobConfig.model_validate({"name": "x", "trainer": {"command": ["t", "--out={run_dir}/own"]}})
    run = LocalRun(job, LocalOptions(run_dir=tmp_path / "r", report_dir=tmp_path / "rep", chaos=ChaosConfig()))
    argv, _ = group_launch(
        run.job,
        group=0,
        attempt=0,
        lighthouse="http://h:1",
        config_path=tmp_path / "j",
        run_dir=run.run_dir,
        python="p",
    )
    assert argv[0] == ["t", f"--out={(tmp_path / 'r').resolve()}/own"]
