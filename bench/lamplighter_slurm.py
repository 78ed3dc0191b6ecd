"""lamplighter's arm on Slurm: `submit` onto a lab with a node daemon per node, faults from the same driver.

Every run of an arm shares one lamplighter.lab.slurm_lab.SlurmLab (head node +
compute nodes, one simulated GPU each, `lamplighter supervise` on every node;
the job runs its own Lighthouse as a Slurm job), reset before each run (no job
left, every node resumed), so drains and exclusions of one run never reach the
next. The job is the same as the baselines' (bench.jobspec) with the Slurm
settings the lab needs. As `lamplighter init` writes it (no `slurm.spare`),
every trainer start is cold: a dead trainer restarts in its allocation through
the group's in-job agent (`restart.in_job`), a node fault requeues the group.
The `lamplighter-spare` arm sets `slurm.spare`, as the docs recommend: the agent
keeps a trainer with its imports done beside the live one and a restart takes
it (a run of that arm with a kill struck and no warm start is a harness fault). Recovery is entirely the
job's and the daemons' work; the driver only injects. Detection times come from
the daemons' action logs (the first kill, requeue or mark-down that names the
group).
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from bench.jobspec import Workload, job_config
from lamplighter.configs.loader import load_job
from lamplighter.configs.schema import HealthConfig, JobConfig, RestartConfig
from lamplighter.lab.slurm_lab import LabSettings, SlurmLab
from lamplighter.lab.testcluster import reset_cluster
from lamplighter.rundir.contract import ATTEMPT_STRIDE
from lamplighter.slurm.actions import SlurmActions
from lamplighter.slurm.chaos.inject import read_records
from lamplighter.slurm.injob.events import journal_path, read_events
from lamplighter.slurm.run import SlurmError
from lamplighter.slurm.submit.submission import Submission, cancel_job, submit_job

DETECT_ACTIONS = ("kill_local", "requeue", "mark_down")


def available() -> str | None:
    """None if the lab can run lamplighter's node daemon here, else why not."""
    try:
        from lamplighter.lab.slurm_lab import daemon_argv

        return None if daemon_argv(Path("node.yaml")) is not None else "the node daemon is not installed"
    except ImportError as e:
        return f"the Slurm lab is not importable: {e}"


def lamplighter_lab(root: Path, w: Workload) -> SlurmLab:
    """The Slurm lab every lamplighter run of a benchmark arm shares, up, its daemons alive.

    One lab per arm rather than per run: its setup (Slurm, 4 node daemons) took 15-40 s of a 2-core machine
    per run. Each run starts from reset_cluster (no job, every node resumed) and reads only the actions
    logged after its submission."""
    base = job_config("probe", root, w, run_id="probe")
    lab = SlurmLab(
        root,
        LabSettings(
            compute_nodes=4,
            gpus_per_node=1,
            health=HealthConfig(**base.health.model_dump()),
            restart=RestartConfig(**base.restart.model_dump()),
        ),
    )
    lab.up()
    try:
        if not lab.daemons_started:
            raise RuntimeError("lamplighter's node daemon did not start in the lab")
        lab.wait_daemons_alive()
    except BaseException:
        lab.down()
        raise
    return lab


class LamplighterSlurm:
    name = "lamplighter"

    def __init__(self, lab: SlurmLab, run_dir: Path, w: Workload, run_id: str, tag: str, spare: bool = False) -> None:
        self.lab, self.run_dir, self.w, self.run_id, self.tag = lab, run_dir, w, run_id, tag
        self.spare = spare
        self.name = "lamplighter-spare" if spare else "lamplighter"
        self.replicas = w.replicas
        self.detections: list[tuple[float, int | None]] = []
        self.sub: Submission | None = None
        self.job: JobConfig | None = None
        self.setup_s = 0.0
        self.since = 0.0  # when this run's job was submitted: the lab's action logs hold earlier runs too
        self.extra: dict[str, int] = {}  # into the run's record: its trainer starts in the allocation, warm and cold

    def _job(self, lab: SlurmLab, port: int) -> JobConfig:
        base = job_config(
            f"b-{self.tag}", self.run_dir, self.w, run_id=self.run_id, lighthouse_port=port, under_slurm=True
        )
        cfg = base.model_dump(mode="json")
        cfg["slurm"] = {
            "requeue": True,
            "exclusive": True,
            "extra_sbatch": [f"--exclude={lab.head}"],
            "head_node": lab.head,
            "slurm_conf": str(lab.cluster.conf_path),
            "time": "00:30:00",
            "spare": self.spare,
            # Runs here are minutes long: renew only near the 30-minute limit, never during a measurement.
            "renewal": {"margin_s": 120, "spacing_s": 120},
        }
        path = self.run_dir.parent / f"{self.tag}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)  # the first run on a fresh machine: no runs/ yet
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return load_job(path)

    def start(self) -> None:
        t0 = time.monotonic()
        port = self.lab.new_job_port()
        # A run after another: no job left, every node up and resumed (a crash or a drain of the last run).
        reset_cluster(self.lab.cluster)
        self.since = time.time()
        self.setup_s = time.monotonic() - t0  # the harness's, not lamplighter's: a run's time limit leaves it out
        self.job = self._job(self.lab, port)
        api = SlurmActions(self.lab.cluster.cli(timeout=15))
        self.sub = submit_job(self.job, api, config_path=str(self.run_dir.parent / f"{self.tag}.yaml"), wait=True)

    def tick(self, now: float) -> None:
        return None  # the node daemons recover

    def stop(self) -> None:
        if self.sub is not None:
            try:
                cancel_job(self.sub, SlurmActions(self.lab.cluster.cli(timeout=15)))
            except SlurmError:
                pass
        self.detections = sorted(
            read_detections(self.lab.action_logs(), self.sub, since=self.since)
            + injob_detections(self.run_dir, self.replicas, since=self.since)
        )

    def settle(self) -> None:
        """Its trainers' restarts inside their allocations, warm (from the spare) and cold (injob journals)."""
        starts = [
            e
            for g in range(self.replicas)
            for e in read_events(journal_path(self.run_dir, g))
            if e.get("event") == "started" and int(e.get("attempt", 0)) % ATTEMPT_STRIDE > 0
        ]
        self.extra = {f"{how}_starts": sum(1 for e in starts if e.get("how") == how) for how in ("warm", "cold")}


def read_detections(logs: list[Path], sub: Submission | None, since: float = 0.0) -> list[tuple[float, int | None]]:
    """(time, group) of every action since `since` that shows a daemon noticed a failure; group from the job id."""
    groups = {} if sub is None else {str(jid): g for g, jid in sub.groups.items()}
    out: list[tuple[float, int | None]] = []
    for path in logs:
        for rec in read_records(path):
            if rec.get("action") not in DETECT_ACTIONS or float(rec.get("ts", 0.0)) < since:
                continue
            target = str(rec.get("target", ""))
            obs = rec.get("observation")
            obs = obs if isinstance(obs, dict) else {}
            group = group_index(rec.get("group", obs.get("group")))
            if group is None:
                group = next((g for jid, g in groups.items() if jid in target), None)
            out.append((float(rec["ts"]), group))
    return sorted(out)


def injob_detections(run_dir: Path, replicas: int, since: float = 0.0) -> list[tuple[float, int | None]]:
    """(time, group) of every trainer step end the in-job agent saw: a restart inside the allocation, which no
    daemon logs (without these a kill read as detected at the next daemon action, once 65 s later)."""
    return [
        (float(e["t"]), g)
        for g in range(replicas)
        for e in read_events(journal_path(run_dir, g))
        if e.get("event") == "ended" and float(e.get("t", 0.0)) >= since
    ]


def group_index(label: object) -> int | None:
    """The replica index in an action's group label: the daemons write "JOB/gN" (older logs: N)."""
    text = str(label) if isinstance(label, int | str) else ""
    tail = text.rsplit("/g", 1)[-1]
    return int(tail) if tail.isdigit() else None
