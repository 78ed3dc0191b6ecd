"""One fault-injected run on a SlurmLab: submit, faults one at a time, wait for the end, report.

Shared by the end-to-end test and `python -m lamplighter.lab.demo`. Every
wait is bounded and says what it waited for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lamplighter.configs.loader import load_job
from lamplighter.configs.schema import JobConfig
from lamplighter.lab.run_end import stop_run
from lamplighter.lab.run_report import write_report
from lamplighter.lab.slurm_lab import SlurmLab
from lamplighter.lab.testcluster import wait_until
from lamplighter.rundir.contract import RunPaths
from lamplighter.rundir.steplog import read_steps
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.chaos.inject import ChaosContext, inject, observe_recovery
from lamplighter.slurm.hostlist import expand_hostlist
from lamplighter.slurm.run import SlurmError
from lamplighter.slurm.submit.submission import Submission, submit_job, wait_ended


def lab_job_config(
    lab: SlurmLab,
    run_dir: Path,
    *,
    name: str,
    steps: int,
    groups: int,
    port: int = 0,
    spare: bool = False,
    step_sleep_s: float = 0.0,
) -> dict[str, Any]:
    """A small job for the lab: one whole compute node per group (never the head), its Lighthouse job on the head;
    with `spare`, each group keeps a warm spare step in its allocation (slurm.spare); `step_sleep_s` paces its
    steps (trainer.model.step_sleep_s)."""
    model = {"dim": 64, "layers": 2, "heads": 4, "seq_len": 64, "batch_size": 16, "step_sleep_s": step_sleep_s}
    cfg: dict[str, Any] = {
        "name": name,
        "run_dir": str(run_dir),
        "trainer": {"steps": steps, "model": model},
        "groups": {"count": groups, "nodes": 1},
        # No host: the Lighthouse binds the address of the node Slurm runs it on, as a user's job does.
        "lighthouse": {"port": port},
        "torchft": {"timeout_s": 3, "quorum_timeout_s": 3, "connect_timeout_s": 10, "pg_timeout_s": 3},
        "slurm": {
            "requeue": True,
            "exclusive": True,
            "extra_sbatch": [f"--exclude={lab.head}"],
            "slurm_conf": str(lab.cluster.conf_path),
            "time": "00:30:00",
            "head_node": lab.head,
            # Runs here are minutes long: renew only near the 30-minute limit.
            "renewal": {"margin_s": 120, "spacing_s": 120},
        },
        "health": lab.settings.health.model_dump(mode="json"),
        "restart": lab.settings.restart.model_dump(mode="json"),
    }
    if spare:
        cfg["slurm"]["spare"] = True
        # The reference trainer's own imports too, as local mode's standbys take them.
        cfg["restart"]["standby_preload"] = [*cfg["restart"]["standby_preload"], "lamplighter.trainer.main"]
    return cfg


@dataclass
class FaultOutcome:
    injected: dict[str, Any]
    recovered: dict[str, Any]


@dataclass
class LabRun:
    lab: SlurmLab
    job: JobConfig
    config_path: Path
    sub: Submission | None = None
    outcomes: list[FaultOutcome] = field(default_factory=list)

    @property
    def api(self) -> SlurmActions:
        return SlurmActions(self.lab.cluster.cli())

    @property
    def ctx(self) -> ChaosContext:
        assert self.sub is not None
        return ChaosContext(self.sub, self.api, gpusim_root=self.lab.gpusim_root, cluster=self.lab.cluster)

    def submit(self) -> Submission:
        self.sub = submit_job(self.job, self.api, config_path=str(self.config_path), wait=True)
        return self.sub

    def committed_steps(self, group: int) -> list[int]:
        assert self.sub is not None
        return [r.step for r in read_steps(RunPaths(Path(self.sub.run_dir)).steps(group)) if r.committed]

    def wait_all_committing(self, timeout: float = 180.0) -> None:
        assert self.sub is not None
        groups = list(self.sub.groups)
        wait_until(lambda: all(self.committed_steps(g) for g in groups), timeout, "every group to commit a step")

    def group_on_node(self, exclude: set[str] | None = None, prefer: int | None = None) -> tuple[int, str]:
        """A running group and its node: `prefer` if it runs, else the first not on a node in `exclude`."""
        assert self.sub is not None
        choices: list[tuple[int, str]] = []
        for g, jid in sorted(self.sub.groups.items()):
            info = self.api.job(jid)
            if info.state == "RUNNING" and info.node_list:
                choices.append((g, expand_hostlist(info.node_list)[0]))
        if not choices:
            raise RuntimeError("no group is running")
        preferred = [c for c in choices if c[0] == prefer] or [c for c in choices if c[1] not in (exclude or set())]
        return (preferred or choices)[0]

    def fault(self, kind: str, group: int | None, recovery_timeout: float = 120.0) -> FaultOutcome:
        rec = inject(self.ctx, kind, group)
        recovered = observe_recovery(self.ctx, rec, recovery_timeout)
        out = FaultOutcome(rec, recovered)
        self.outcomes.append(out)
        return out

    def wait_end(self, timeout: float) -> dict[int, str]:
        assert self.sub is not None
        return wait_ended(self.sub, self.api, timeout)

    def finish(self, timeout: float) -> dict[int, str]:
        """What the run was for has happened: stop the job a few steps ahead of where it is (its stop-at file,
        lab/run_end.py) and wait for every Slurm job of it to end."""
        assert self.sub is not None
        stop_run(Path(self.sub.run_dir), self.sub.groups)
        return self.wait_end(timeout)

    def report(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.sub is not None
        return write_report(self.sub, action_logs=self.lab.action_logs(), extra=extra)


def prepare_run(
    lab: SlurmLab, work: Path, *, name: str, steps: int, groups: int, port: int = 0, step_sleep_s: float = 0.0
) -> LabRun:
    cfg = lab_job_config(lab, work / name, name=name, steps=steps, groups=groups, port=port, step_sleep_s=step_sleep_s)
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return LabRun(lab, load_job(path), path)


def drained_nodes(run: LabRun) -> dict[str, str | None]:
    try:
        return {n.name: n.reason for n in run.api.nodes() if n.is_drained}
    except SlurmError:
        return {}


def bring_back(run: LabRun, lab: SlurmLab, node: str, timeout: float = 120.0) -> None:
    """Repair a crashed node, as its admin would, and wait until the head has resumed it (its slurmd answers
    and Slurm sees it up): the node-crash drain is the head's, for silence, not a fault the node keeps."""
    lab.restart_node(node)
    wait_until(lambda: node not in drained_nodes(run), timeout, f"the head to resume {node} once its slurmd answers")


def per_kind_lines(report: dict[str, Any]) -> list[str]:
    """One line per fault: kind, target, detection, running again (and where), first commit, stall."""

    def s(x: Any) -> str:
        return "-" if x is None else f"{x:6.2f}s"

    lines = [
        f"{'fault':<16}{'group':>5} {'node':<5}->{'node':<6}{'detect':>9}{'running':>9}{'1st commit':>11}"
        f"{'recovery':>10}{'stall':>9}  detected as"
    ]
    for f in report["faults"]:
        lines.append(
            f"{f['kind']:<16}{'-' if f['target_group'] is None else f['target_group']:>5} {f['node'] or '-':<5}->"
            f"{f['node_after'] or '-':<6}{s(f['detection_latency_s']):>9}{s(f['running_again_s']):>9}"
            f"{s(f['first_commit_after_restart_s']):>11}{s(f['recovery_s']):>10}{s(f['survivor_stall_s']):>9}  "
            f"{f['detected_as']}"
        )
    return lines


def now() -> float:
    return time.time()
