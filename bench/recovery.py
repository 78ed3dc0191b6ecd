"""Recovery anatomy per fault kind: one run per (kind, strategy) that waits for the whole recovery.

One run per (kind, strategy) with a single fault a few seconds into
training, which stops once the failed replica commits again and the job has
passed its step at the fault (or after the timeout: what did not happen by
then counts as never). The anatomy comes from bench.metrics like every other
fault; the kills and hangs of the goodput runs are pooled in, but there a
phase the run ended before is left out rather than counted as never.

- node crash: the node's whole PID namespace is SIGKILLed (slurmd, step
  daemons, trainer). Slurm runs: checkpoint-restart and the poll runner.
  lamplighter's local mode has no nodes to crash (its Slurm path was not
  usable when this was built), so it has no figure here.
- Lighthouse loss: the Lighthouse process is SIGKILLed. lamplighter (local
  mode restarts it) and the poll runner (nobody restarts it: the runner only
  watches group jobs); checkpoint-restart has no Lighthouse.
- GPU fault: not measured. This machine has no GPU; the simulated GPUs are
  watched only by lamplighter's node daemon, and a baseline without health
  checks never notices a GPU fault that does not crash the trainer.
"""

from __future__ import annotations

from typing import Any

from bench.goodput import Bench
from bench.metrics import run_metrics
from lamplighter.supervisor.chaos import PlannedFault

FAULT_AT_S = 6.0
SCENARIOS = {
    "kill": ("lamplighter", "ckpt-restart", "poll-10s"),
    "hang": ("lamplighter", "ckpt-restart", "poll-10s"),
    "node-crash": ("lamplighter", "ckpt-restart", "poll-10s"),
    "lighthouse-kill": ("lamplighter", "poll-10s"),
}


def run_scenarios(b: Bench, kinds: list[str], timeout_s: float, log: Any = print) -> list[dict[str, Any]]:
    rows = []
    for kind in kinds:
        for strategy in SCENARIOS[kind]:
            if strategy == "lamplighter" and kind == "node-crash" and b.lamplighter_mode != "slurm":
                continue  # local mode has no nodes
            planned = [PlannedFault(FAULT_AT_S, kind, None)]
            # Slurm runs stop once the fault is recovered from; lamplighter's local run stops at its target.
            local = strategy == "lamplighter" and b.lamplighter_mode == "local"
            steps = b.w.steps if local else 20 * b.w.steps
            run = b.one(
                strategy,
                None,
                0,
                7,
                planned,
                timeout_s,
                ckpt_mtbf_s=30.0,
                tag=f"{strategy}-{kind}",
                until_recovered=True,
                steps=steps,
            )
            run.extra["scenario"] = kind
            m = run_metrics(run)
            rows.append({"run": run.summary(), "metrics": m})
            log(f"[recovery] {kind} {strategy}: {m['anatomy']} reached {m['reached']}")
    return rows
