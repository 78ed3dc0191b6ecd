"""The inputs `lamplighter plan` takes from the benchmark's result files, each as a range with its source.

`from_results` is pure: the parsed result documents in, one Measured per input out (pessimistic, central,
optimistic, and the file, commit and field it came from). The package carries a snapshot of what
bench/results gives (measured_inputs.json, `make plan-inputs`); `--results DIR` reads a fresh directory.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# The result files plan reads; any may be missing (a field then keeps its built-in fallback).
FILES = (
    "fault_cost",
    "stall_groups",
    "lighthouse_quorum",
    "overhead",
    "busy_queue",
    "hw_fault_path",
    "demo-slurm",
)
MAX_FILE_BYTES = 8 << 20  # the largest result file is under 1 MiB: a bigger one is not ours
SNAPSHOT = Path(__file__).with_name("measured_inputs.json")
# bench/jobspec.py's health.hang_timeout_s, for a fault_cost.json that does not record its own.
BENCH_HANG_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Measured:
    """One input read from a result file: low is the pessimistic end (the slowest run), high the optimistic."""

    key: str
    low: float
    central: float
    high: float
    source: str  # "fault_cost.json@faca387 table.kill.lamplighter.detect_s (n=3)"
    meaning: str

    def values(self) -> tuple[float, float, float]:
        return self.low, self.central, self.high


class MalformedResult(ValueError):
    """A result file that is there but does not hold what plan reads, with the file and the field."""


def _spread(doc: Mapping[str, Any], path: Sequence[str], name: str) -> Mapping[str, Any]:
    node: Any = doc
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            raise MalformedResult(f"{name}.json has no {'.'.join(path)}")
        node = node[part]
    if not isinstance(node, Mapping) or not all(isinstance(node.get(k), int | float) for k in ("median", "min", "max")):
        raise MalformedResult(f"{name}.json: {'.'.join(path)} is not a median/min/max spread")
    return node


def _at(doc: Mapping[str, Any], name: str) -> str:
    env = doc.get("environment")
    commit = env.get("commit") if isinstance(env, Mapping) else None
    return f"{name}.json@{commit or 'unknown'}"


def _slower_is_worse(key: str, s: Mapping[str, Any], source: str, meaning: str, minus: float = 0.0) -> Measured:
    return Measured(key, s["max"] - minus, s["median"] - minus, s["min"] - minus, f"{source} (n={s.get('n')})", meaning)


def _fault_cost(doc: Mapping[str, Any]) -> list[Measured]:
    at = _at(doc, "fault_cost")
    config = doc.get("config")
    timeout = (
        float(config.get("hang_timeout_s", BENCH_HANG_TIMEOUT_S))
        if isinstance(config, Mapping)
        else BENCH_HANG_TIMEOUT_S
    )
    path = ("table", "kill", "lamplighter")
    detect = _spread(doc, (*path, "detect_s"), "fault_cost")
    cold = _spread(doc, (*path, "back_s"), "fault_cost")
    warm = _spread(doc, ("table", "kill", "lamplighter-spare", "back_s"), "fault_cost")
    hang = _spread(doc, ("table", "hang", "lamplighter", "detect_s"), "fault_cost")
    d = detect["median"]
    return [
        _slower_is_worse("detect_s", detect, f"{at} table.kill.lamplighter.detect_s", "a trainer's exit seen"),
        _slower_is_worse(
            "hang_detect_lag_s",
            hang,
            f"{at} table.hang.lamplighter.detect_s, less its {timeout:g} s hang timeout",
            "a hang called, beyond the hang timeout",
            minus=timeout,
        ),
        _slower_is_worse(
            "restart_cold_s",
            cold,
            f"{at} table.kill.lamplighter.back_s, less the median detection",
            "a cold in-job restart to its first commit, heal included",
            minus=d,
        ),
        _slower_is_worse(
            "restart_warm_s",
            warm,
            f"{at} table.kill.lamplighter-spare.back_s, less the median detection",
            "a warm spare's restart to its first commit, heal included",
            minus=d,
        ),
    ]


def _stall_groups(doc: Mapping[str, Any]) -> list[Measured]:
    at = _at(doc, "stall_groups")
    table, fit = doc.get("table"), doc.get("fit")
    if not isinstance(table, Mapping) or not isinstance(fit, Mapping):
        raise MalformedResult("stall_groups.json has no table or fit")
    out = []
    for key, kind, meaning in (
        ("stall_s", "kill", "the survivors' stall at an exit"),
        ("hang_stall_s", "hang", "the survivors' stall at a hang (the process group's timeout, then the quorum)"),
    ):
        sizes = table.get(kind)
        base = fit.get(kind, {}).get("base_s") if isinstance(fit.get(kind), Mapping) else None
        if not isinstance(sizes, Mapping) or not sizes or not isinstance(base, int | float):
            raise MalformedResult(f"stall_groups.json has no {kind} table or fit")
        spreads = [_spread(doc, ("table", kind, n, "stall_max_s"), "stall_groups") for n in sizes]
        out.append(
            Measured(
                key,
                max(s["max"] for s in spreads),
                float(base),
                min(s["min"] for s in spreads),
                f"{at} fit.{kind}.base_s; range over table.{kind}.*.stall_max_s ({', '.join(sizes)} groups)",
                meaning,
            )
        )
    rejoin = [
        _spread(doc, ("table", kind, n, "rejoin_stall_max_s"), "stall_groups")
        for kind in table
        for n in table[kind]
        if isinstance(table[kind], Mapping) and "rejoin_stall_max_s" in table[kind][n]
    ]
    if not rejoin:
        raise MalformedResult("stall_groups.json has no rejoin_stall_max_s")
    out.append(
        Measured(
            "rejoin_stall_s",
            max(s["max"] for s in rejoin),
            statistics.median(s["median"] for s in rejoin),
            min(s["min"] for s in rejoin),
            f"{at} table.*.*.rejoin_stall_max_s (median of {len(rejoin)} medians)",
            "the survivors' stall when the group rejoins",
        )
    )
    return out


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of y on x; 0 with fewer than two distinct x."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)


def _lighthouse_quorum(doc: Mapping[str, Any]) -> list[Measured]:
    rows = doc.get("rows")
    if not isinstance(rows, list) or not rows:
        raise MalformedResult("lighthouse_quorum.json has no rows")
    pts = {
        k: [(float(r["groups"]), float(_spread(r, ("quorum_s",), "lighthouse_quorum")[k])) for r in rows]
        for k in ("median", "min", "max")
    }
    most = max(int(r["groups"]) for r in rows)
    return [
        Measured(
            "quorum_per_group_s",
            max(0.0, slope(pts["max"])),
            max(0.0, slope(pts["median"])),
            max(0.0, slope(pts["min"])),
            f"{_at(doc, 'lighthouse_quorum')} rows[].quorum_s against groups, least squares (2-{most} groups)",
            "one quorum's growth per replica group",
        )
    ]


def _overhead(doc: Mapping[str, Any]) -> list[Measured]:
    rows = doc.get("rows")
    if not isinstance(rows, list) or not rows:
        raise MalformedResult("overhead.json has no rows")
    ms = [_spread(r, ("torchft_extra_ms_per_step",), "overhead") for r in rows]
    return [
        Measured(
            "step_extra_s",
            max(s["max"] for s in ms) / 1000,
            statistics.median(s["median"] for s in ms) / 1000,
            min(s["min"] for s in ms) / 1000,
            f"{_at(doc, 'overhead')} rows[].torchft_extra_ms_per_step ({len(ms)} model sizes)",
            "torchft's time per step over plain DDP",
        )
    ]


def _busy_queue(doc: Mapping[str, Any]) -> list[Measured]:
    waits = [
        float(a["queue_wait_s"])
        for a in doc.get("absences") or []
        if isinstance(a, Mapping) and isinstance(a.get("queue_wait_s"), int | float) and not a.get("run_ended_first")
    ]
    if not waits:
        raise MalformedResult("busy_queue.json has no absences[].queue_wait_s")
    return [
        Measured(
            "queue_wait_s",
            max(waits),
            statistics.median(waits),
            min(waits),
            f"{_at(doc, 'busy_queue')} absences[].queue_wait_s (n={len(waits)}, other users' jobs queued)",
            "a fresh submission's wait in a busy queue",
        )
    ]


def _hw_fault_path(doc: Mapping[str, Any]) -> list[Measured]:
    return [
        _slower_is_worse(
            "gpu_fault_s",
            _spread(doc, ("summary", "gpu_fault", "running_elsewhere_s"), "hw_fault_path"),
            f"{_at(doc, 'hw_fault_path')} summary.gpu_fault.running_elsewhere_s",
            "a bad GPU to its group running on another node",
        )
    ]


def _demo_slurm(doc: Mapping[str, Any]) -> list[Measured]:
    report = doc.get("report")
    faults = report.get("faults") if isinstance(report, Mapping) else None
    took = [
        float(f["recovery_s"])
        for f in faults or []
        if isinstance(f, Mapping)
        and f.get("kind") == "lighthouse-kill"
        and isinstance(f.get("recovery_s"), int | float)
    ]
    if not took:
        raise MalformedResult("demo-slurm.json has no lighthouse-kill fault with its recovery_s")
    return [
        Measured(
            "lighthouse_out_s",
            max(took),
            statistics.median(took),
            min(took),
            f"{_at(doc, 'demo-slurm')} report.faults[lighthouse-kill].recovery_s (n={len(took)})",
            "a killed Lighthouse to the groups' next commit",
        )
    ]


PARSERS = {
    "fault_cost": _fault_cost,
    "stall_groups": _stall_groups,
    "lighthouse_quorum": _lighthouse_quorum,
    "overhead": _overhead,
    "busy_queue": _busy_queue,
    "hw_fault_path": _hw_fault_path,
    "demo-slurm": _demo_slurm,
}


def from_results(docs: Mapping[str, Mapping[str, Any]]) -> dict[str, Measured]:
    """Every input the documents given (by file stem) hold; raises MalformedResult naming the file and field."""
    out: dict[str, Measured] = {}
    for name, parse in PARSERS.items():
        if name in docs:
            try:
                out.update((m.key, m) for m in parse(docs[name]))
            except MalformedResult:
                raise
            except (KeyError, TypeError, ValueError) as e:
                raise MalformedResult(f"{name}.json: {type(e).__name__}: {e}") from e
    return out


def load(directory: Path) -> dict[str, Measured]:
    """from_results over the files of FILES found in `directory`, each read up to MAX_FILE_BYTES."""
    docs = {}
    for name in FILES:
        path = directory / f"{name}.json"
        if not path.is_file():
            continue
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise MalformedResult(f"{path}: larger than {MAX_FILE_BYTES} bytes")
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise MalformedResult(f"{path}: not JSON: {e}") from e
        if not isinstance(doc, dict):
            raise MalformedResult(f"{path}: not a JSON object")
        docs[name] = doc
    return from_results(docs)


def snapshot() -> dict[str, Measured]:
    """What the package carries: bench/results' inputs when the snapshot was written (a copy: read once)."""
    return dict(_snapshot())


@functools.cache
def _snapshot() -> dict[str, Measured]:
    # Every scenario of every size of a sweep looks inputs up here: the file is read once per process.
    doc = json.loads(SNAPSHOT.read_text())
    return {k: Measured(**v) for k, v in doc["inputs"].items()}


def dump(measured: Mapping[str, Measured]) -> str:
    return json.dumps({"inputs": {k: asdict(m) for k, m in sorted(measured.items())}}, indent=2) + "\n"


def main(argv: Sequence[str]) -> int:
    """`python -m lamplighter.plan.measured DIR`: print the snapshot of DIR's inputs (make plan-inputs)."""
    if len(argv) != 1:
        print("usage: python -m lamplighter.plan.measured RESULTS_DIR > plan/measured_inputs.json", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(dump(load(Path(argv[0]))))
    except MalformedResult as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
