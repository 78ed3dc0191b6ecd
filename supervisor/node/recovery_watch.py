"""How long a restarted replica group took to commit again, measured where it came back.

The node daemon that adopts a trainer of Slurm restart N >= 1 reads the group's
step log in the run directory (steps/<group>.jsonl, written by the reference
trainer; attempts numbered restarts * 100 + in-job restarts, rundir/contract.py):
the group's last committed step of an earlier restart, and its first committed
step of restart N. Restarts inside the allocation are the job's own agent's
(slurm/injob/events.py records them) and are not measured here. The time between them is the group's recovery
(detection, requeue, restart, heal and one step), observed once per (job,
attempt); where the first state came from (`healed_from`: a peer or the
fallback checkpoint) is counted too. A trainer that keeps no step log is not
measured. Only the log's last TAIL_BYTES are read, as a regular file of the
job's user (rundir/owned_file.py), each cycle until found, for at most GIVE_UP_S.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from lamplighter.rundir.contract import RunPaths, slurm_restarts_of
from lamplighter.rundir.owned_file import OwnedFileError, read_owned_tail
from lamplighter.rundir.steplog import StepRecord, parse_step
from lamplighter.supervisor.metrics import DaemonMetrics
from lamplighter.supervisor.node.trainers import NodeTrainer

TAIL_BYTES = 64 * 1024
GIVE_UP_S = 600.0


def tail_records(path: Path, owner: int | None, max_bytes: int = TAIL_BYTES) -> list[StepRecord]:
    try:
        data, whole = read_owned_tail(path, owner=owner, max_bytes=max_bytes)
    except OwnedFileError:
        return []
    lines = data.decode(errors="replace").splitlines()
    if not whole and lines:
        lines = lines[1:]
    return [r for r in (parse_step(line) for line in lines) if r is not None]


def recovery_of(records: list[StepRecord], restarts: int) -> tuple[float, str] | None:
    """(seconds from the last commit before Slurm restart `restarts` to its first commit, heal source); None if not yet."""
    before = [r for r in records if r.committed and slurm_restarts_of(r.attempt) < restarts]
    after = [r for r in records if r.committed and slurm_restarts_of(r.attempt) == restarts]
    if not before or not after:
        return None
    first = min(after, key=lambda r: r.t)
    healed = next((r.healed_from for r in sorted(after, key=lambda r: r.t) if r.healed_from), None)
    source = "none" if healed is None else healed.split(":", 1)[0]
    return first.t - max(r.t for r in before), source


class RecoveryWatch:
    def __init__(self, metrics: DaemonMetrics) -> None:
        self.metrics = metrics
        self._done: set[tuple[str, int]] = set()
        self._first_seen: dict[tuple[str, int], float] = {}

    def observe(self, now: float, trainers: Iterable[NodeTrainer]) -> None:
        for t in trainers:
            key = (t.job_id, t.attempt)
            if t.attempt < 1 or t.rank != 0 or t.step_number is None or not t.run_dir or key in self._done:
                continue
            since = self._first_seen.setdefault(key, now)
            steps = RunPaths(Path(t.run_dir)).steps(t.replica_id or 0)
            found = recovery_of(tail_records(steps, t.uid), t.attempt)
            if found is not None:
                seconds, source = found
                self.metrics.recovery.labels(job_name=t.job_name).observe(max(seconds, 0.0))
                self.metrics.heals.labels(job_name=t.job_name, source=source).inc()
                self._done.add(key)
                self._first_seen.pop(key, None)
            elif now - since > GIVE_UP_S:
                self._done.add(key)
                self._first_seen.pop(key, None)
