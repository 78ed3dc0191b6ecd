"""A job outlives its Slurm time limit: groups renew one at a time and heal from the live ones, 0 steps lost.

Real Slurm 22.05 (the test cluster), node daemons on every node, the reference
trainer, 3 groups with `--time=1` (one minute, Slurm's smallest limit) and
renewal margin 5 s / spacing 25 s: groups 0, 1, 2 are warned 55, 30 and 5 s
before their limit. Slurm checks time limits every 30 s and warns 30-60 s early,
so with a one-minute limit groups 0 and 1 are warned at the first check after
their start and group 2 at the same or the next: the renewal lease orders the
groups warned together. The job trains until every group has renewed twice
and trained again (then the test stops it: its stop-at file); a renewed group
is back (requeue delay, start, heal) in 10-30 s on this machine, so a group
that cannot wait for everyone renews, near its limit, as soon as one other
group is live and caught up.

Prints the renewal timeline (run pytest with -s): for each renewal, when the
group was warned, requeued (and how long before its limit), running again,
and committed again (healed from a peer).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from realparts import FAR_STEPS, STEP_SLEEP_S, require_slurm

from lamplighter.configs.loader import load_job
from lamplighter.configs.schema import HealthConfig, RestartConfig
from lamplighter.lab.e2e_run import LabRun, lab_job_config
from lamplighter.lab.run_report import read_action_logs
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab, leftover_job_processes, running_lab
from lamplighter.lab.testcluster import wait_until
from lamplighter.rundir.contract import RunPaths, slurm_restarts_of
from lamplighter.rundir.steplog import read_steps
from lamplighter.slurm.injob.renew import RENEWAL_DIR

pytestmark = pytest.mark.integration

GROUPS = 3
RENEWALS = 2  # each group renews this often (and trains again after each) before the test stops the job


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SlurmLab]:
    require_slurm()
    with running_lab(
        tmp_path / "lab",
        LabSettings(
            compute_nodes=4,
            gpus_per_node=2,
            health=HealthConfig(hang_timeout_s=15.0, poll_interval_s=0.5, probe_deadline_s=2.0),
            # Renewals do not spend this budget (LAMPLIGHTER_RENEWALS; tests/daemon/test_node_policy.py);
            # it is large so that failures the renewal churn causes are recovered too.
            restart=RestartConfig(budget_per_group=1000, crash_loop_max=10),
        ),
    ) as lab:
        yield lab


def live_in(row: dict[str, Any]) -> set[int]:
    """The other groups a renewal helper saw live and caught up when it left: its reason's "(0, 2)"."""
    m = re.search(r"\(([0-9, ]+)\)\s*$", str(row["reason"]))
    if m is None:
        return set(range(GROUPS)) - {row["group"]} if str(row["reason"]).startswith("all ") else set()
    return {int(x) for x in m.group(1).split(",") if x.strip()}


def renewal_timeline(run_dir: Path, groups: int) -> list[dict[str, Any]]:
    """One row per renewal: warned, requeued, first commit after (from the step logs), healed from."""
    rows = []
    for g in range(groups):
        path = run_dir / RENEWAL_DIR / f"g{g}.jsonl"
        events = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        steps = list(read_steps(RunPaths(run_dir).steps(g)))
        warned = None
        for e in events:
            if e["event"] == "warned":
                warned = e
            elif e["event"] == "requeued":
                # The runs after it: a later Slurm restart (an attempt counts in-job restarts too), not the
                # run being renewed, which may commit once more between the event and Slurm's requeue.
                later = [r for r in steps if slurm_restarts_of(r.attempt) > e["restarts"] and r.t > e["t"]]
                first = next((r for r in later if r.committed), None)
                heal = next((r for r in later if r.healed_from), None)
                attempt = later[0].attempt if later else None
                rows.append(
                    {
                        "group": g,
                        "warned": warned["t"] if warned else None,
                        "warned_left_s": warned["left_s"] if warned else None,
                        "requeued": e["t"],
                        "requeued_left_s": e["left_s"],
                        "reason": e["reason"],
                        "first_commit": first.t if first else None,
                        "first_step": first.step if first else None,
                        "healed_from": heal.healed_from if heal else None,
                        "attempt": attempt,
                    }
                )
    return sorted(rows, key=lambda r: r["requeued"])


def renewal_requeues(run_dir: Path, groups: int) -> list[tuple[str, float]]:
    """(Slurm job id, time) of every renewal."""
    out = []
    for g in range(groups):
        path = run_dir / RENEWAL_DIR / f"g{g}.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            e = json.loads(line)
            if e["event"] == "requeued":
                out.append((str(e["job_id"]), float(e["t"])))
    return out


def print_timeline(rows: list[dict[str, Any]], t0: float, wall: float, report: dict[str, Any]) -> None:
    def t(x: float | None) -> str:
        return "     -" if x is None else f"{x - t0:6.1f}"

    print(f"\nrenewal timeline (seconds after submit; --time=1, {GROUPS} groups, {report['target_steps']} steps)")
    print(
        f"{'group':>5} {'warned':>7} {'left':>5} {'requeued':>9} {'left':>5} {'commits again':>14} {'after':>6}  healed"
    )
    for r in rows:
        gap = None if r["first_commit"] is None else r["first_commit"] - r["requeued"]
        print(
            f"{r['group']:>5} {t(r['warned']):>7} {r['warned_left_s'] or 0:5.0f} {t(r['requeued']):>9} "
            f"{r['requeued_left_s'] or 0:5.0f} {t(r['first_commit']):>14} {'-' if gap is None else f'{gap:6.1f}':>6}  "
            f"{r['healed_from']} (step {r['first_step']}; {r['reason']})"
        )
    print(
        f"wall {wall:.0f} s; steps committed {report['steps_committed']}, lost {report['steps_lost']}, "
        f"weights identical {report['weights_identical']}"
    )


@pytest.mark.heavy(seconds=185)
def test_job_outlives_a_one_minute_time_limit(lab: SlurmLab, tmp_path: Path) -> None:
    slurm_lab, port = lab, lab.job_port
    cfg = lab_job_config(
        slurm_lab,
        tmp_path / "renew",
        name="renew",
        steps=FAR_STEPS,
        groups=GROUPS,
        port=port,
        step_sleep_s=STEP_SLEEP_S,
    )
    cfg["slurm"]["time"] = "1"
    # The groups are warned 55, 30 and 5 s before their one-minute limit (Slurm checks limits every 30 s).
    # The Lighthouse job has a limit of its own, longer than the run: three groups and the Lighthouse
    # renewing within one minute would leave no slot in which a group is sure to find a live peer.
    cfg["slurm"]["lighthouse_time"] = "30:00"
    cfg["slurm"]["renewal"] = {"margin_s": 5, "spacing_s": 25}
    # A group leaves every ~20 s: torchft timeouts that ride through a peer leaving mid-step.
    cfg["torchft"] = {"timeout_s": 10, "quorum_timeout_s": 10, "connect_timeout_s": 10, "pg_timeout_s": 5}
    path = tmp_path / "renew.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    run = LabRun(slurm_lab, load_job(path), path)
    t0 = time.time()
    sub = run.submit()
    run.wait_all_committing()

    def renewed() -> bool:
        rows = renewal_timeline(Path(sub.run_dir), GROUPS)
        return all(
            sum(r["group"] == g and r["first_commit"] is not None for r in rows) >= RENEWALS for g in range(GROUPS)
        )

    wait_until(renewed, 900, f"every group to renew {RENEWALS} times and train again")
    states = run.finish(600)
    wall = time.time() - t0
    report = run.report()
    rows = renewal_timeline(Path(sub.run_dir), GROUPS)
    print_timeline(rows, t0, wall, report)
    # The job outlived its one-minute limit (each group renewed, the rows below), and ended because it was
    # done, not by the limit. (Not "past two limits": 3 groups renewing twice, 25 s apart, took 119.4 s once.)
    assert wall > 60, wall
    # Every group completed; the release job cancels the Lighthouse job when they have.
    assert sub.lighthouse_job_id in states and set(states.values()) == {"COMPLETED"}, states
    assert report["reached_target"] and report["steps_lost"] == 0, report["lost_step_numbers"]
    assert report["weights_identical"], report["hash_mismatches"]
    # Every group renewed, more than once; every run after a renewal that trained healed from a live
    # peer first (the last runs may have started after the target step).
    for g in range(GROUPS):
        assert sum(r["group"] == g for r in rows) >= 2, rows
    trained = [r for r in rows if r["first_commit"] is not None]
    assert len(trained) >= len(rows) - GROUPS, rows
    for r in trained:
        assert str(r["healed_from"]).startswith("peer"), r
    # Never all groups away at once: when a group left, another one was live with the state. A group is back
    # from its first commit, or from when the Lighthouse listed it live and caught up (a renewal helper's
    # "live (G)"), whichever came first: a healed group is in the quorum a moment before its first commit.
    end = max(r["requeued"] for r in rows) + 3600

    def back(o: dict[str, Any]) -> float:
        seen_live = [x["requeued"] for x in rows if x["requeued"] >= o["requeued"] and o["group"] in live_in(x)]
        return min([o["first_commit"] or end, *seen_live])

    for r in rows:
        away = [o["group"] for o in rows if o is not r and o["requeued"] <= r["requeued"] < back(o)]
        assert len(set(away)) <= GROUPS - 2, (r, away)
    # A renewal is not a failure: no node daemon action is about a trainer that a renewal stopped.
    # (Any other failure the churn causes is the daemons' to handle, as usual: they are printed.)
    actions = [a for a in read_action_logs(slurm_lab.action_logs()) if a.get("action") not in ("log", None)]
    renewed = renewal_requeues(Path(sub.run_dir), GROUPS)
    for a in actions:
        obs = a.get("observation") or {}
        print(f"daemon {a['node']}: {a['action']} job {a['target']}: {a['reason']}")
        exited = obs.get("exited_at")
        assert not any(
            job == str(a["target"]) and exited is not None and t - 1 <= exited <= t + 15 for job, t in renewed
        ), (a, renewed)
        assert a["action"] != "give_up", a
    wait_until(lambda: not leftover_job_processes(run.job.name), 30, "every process of the job to exit")
