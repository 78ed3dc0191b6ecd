"""The everyday verbs on the real Slurm 22.05 test cluster: a group whose job failed is refused while lamplighter
may still requeue it (scontrol's EndTime read right), revived once a daemon gave it up (a fresh sbatch after the
Lighthouse job, which runs), then `status --watch` reads every job in one squeue and `logs` shows the new job's
file. Plain scripts stand in for the rendered ones: what is under test is the Slurm side."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from lamplighter.commands import job as job_cli
from lamplighter.commands.cli import build_parser, main
from lamplighter.commands.revive import Refused, revive
from lamplighter.lab.testcluster import TestCluster, wait_until
from lamplighter.rundir.actions import format_action
from lamplighter.slurm.actions import SlurmActions, poll_job
from lamplighter.slurm.run import SlurmError
from lamplighter.slurm.submit.submission import Submission, load, save

pytestmark = pytest.mark.integration
WAIT = 60.0


class Counting:
    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)

        def call(*a: Any, **kw: Any) -> Any:
            self.calls.append(name)
            return attr(*a, **kw)

        return call


def script(run: Path, name: str, log: str, body: str) -> Path:
    path = run / "sbatch" / f"{name}.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"#!/bin/bash\n#SBATCH --job-name=ll-verbs-{name}\n#SBATCH --nodes=1\n#SBATCH --requeue\n"
        f'#SBATCH --output="{run}/logs/{log}-%j.out"\n{body}\n'
    )
    return path


def test_revive_status_watch_and_logs_on_real_slurm(
    clean_slurm_cluster: TestCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = SlurmActions(clean_slurm_cluster.cli())
    run = tmp_path / "verbs"
    (run / "logs").mkdir(parents=True)
    fail = run / "fail-g1"
    fail.touch()
    lh = api.submit(script(run, "lighthouse", "lighthouse", 'echo "lighthouse up"; sleep 300'))
    body = 'echo "group {g} attempt ${{SLURM_RESTART_COUNT:-0}}"; [ -e "{fail}" ] && exit 3; sleep 300'
    groups = {
        g: api.submit(script(run, f"group-{g}", f"g{g}", body.format(g=g, fail=fail if g else run / "never")), after=lh)
        for g in (0, 1)
    }
    sub = Submission("verbs", "x.yaml", str(run), str(clean_slurm_cluster.conf_path), "", lh, groups, [], time.time())
    save(sub)
    new: int | None = None
    try:
        poll_job(api, groups[1], lambda j: j.state == "FAILED", WAIT, "FAILED")
        poll_job(api, groups[0], lambda j: j.running, WAIT, "RUNNING")
        # Just ended, within its budget and not given up: lamplighter may still requeue it.
        with pytest.raises(Refused, match=r"ended FAILED \d+ s ago within its restart budget"):
            revive(run, 1, api, uid=0, now=time.time())
        with pytest.raises(Refused, match="is RUNNING: nothing to revive"):
            revive(run, 0, api, uid=0, now=time.time())
        ref = [{"job_id": str(groups[1]), "group": "verbs/g1", "attempt": 0}]
        line = format_action(time.time(), "n2", "give_up", str(groups[1]), "GIVING UP: budget spent", {}, jobs=ref)
        (run / "actions.jsonl").write_text(line + "\n")
        fail.unlink()
        out = revive(run, 1, api, uid=0, now=time.time(), note="fixed")
        new = out.new_job_id
        assert out.plan.how == "resubmit" and out.plan.after == lh and new is not None
        info = poll_job(api, new, lambda j: j.running, WAIT, "the revived group RUNNING")
        assert info.name == "ll-verbs-group-1" and info.restarts == 0 and load(run).groups == {0: groups[0], 1: new}

        watched = Counting(api)
        refreshes: list[float] = []

        def once(s: float) -> None:
            refreshes.append(s)
            raise KeyboardInterrupt

        args = build_parser().parse_args(["status", str(run), "--watch", "--json"])
        assert job_cli.run_status(args, api=watched, sleep=once) == 0  # type: ignore[arg-type]
        st = json.loads(capsys.readouterr().out)
        assert watched.calls == ["jobs_by_id", "nodes"] and refreshes == [10.0]
        assert st["groups"]["1"] == {**st["groups"]["1"], "job_id": new, "state": "RUNNING", "restarts": 0}
        assert st["groups"]["0"]["state"] == "RUNNING" and st["lighthouse"]["state"] == "RUNNING"
        assert st["jobs_from"] == "one squeue" and st["slurm_error"] is None

        log = run / "logs" / f"g1-{new}.out"
        wait_until(lambda: log.exists() and "attempt" in log.read_text(), WAIT, "the revived job's first line")
        assert main(["logs", str(run), "--group", "1"]) == 0
        assert capsys.readouterr().out == f"==> {log} (group 1, Slurm job {new}) <==\ngroup 1 attempt 0\n"
        assert main(["why", str(run)]) == 0
        assert f"revive {groups[1]}  [ok]" in capsys.readouterr().out
    finally:
        for j in [lh, *groups.values(), *([new] if new else [])]:
            try:
                api.cancel(j)
            except SlurmError:
                pass
