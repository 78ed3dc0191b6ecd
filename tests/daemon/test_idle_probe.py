"""The GPU probe's pace: every cycle while a lamplighter trainer runs on the node, slower with none
(`health.idle_probe_interval_s`), since a probe's CPU is taken from whatever other job runs there."""

from __future__ import annotations

from pathlib import Path

from fake_node import PID0, FakeNode

from lamplighter.configs.schema import JobConfig
from lamplighter.supervisor.gpu.observation import GpuObservation

HEALTH = {"hang_timeout_s": 20, "startup_timeout_s": 60, "progress": "off"}


def ecc(gpu: int) -> GpuObservation:
    return GpuObservation(gpu, "fault", "ecc", f"GPU {gpu} 1 new uncorrectable ECC error", {"problems": ["ecc"]})


def test_an_idle_node_is_probed_at_the_idle_pace_and_a_fault_found_then_still_drains_it(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, health={"idle_probe_interval_s": 10}, max_drain_fraction=0.5)
    try:
        start = node.clock.t
        assert node.run(30) == []  # 30 cycles of 1 s, no job here
        assert [t - start for t in node.gpus.probes] == [0, 10, 20]
        node.gpus.next = [ecc(2)]
        results = node.run(11)
        assert [r["action"] for r in results] == ["drain"], results
        assert node.slurm.node("n1").is_drained
    finally:
        node.close()
        node.remove()


def test_a_node_running_a_lamplighter_trainer_is_probed_every_cycle(tmp_path: Path) -> None:
    node = FakeNode(tmp_path, health={"idle_probe_interval_s": 10})
    try:
        run_dir, config = node.job_dir(JobConfig(name="llama", health=HEALTH))
        job = node.submit("llama", 0)
        node.task(PID0 + 100, job, "llama", 0, run_dir=run_dir, config=config)
        node.run(5)
        assert len(node.gpus.probes) == 5
        node.gone(PID0 + 100)
        node.slurm.cancel(job)
        last = node.gpus.probes[-1]
        node.run(10)  # the trainer gone: back to the idle pace, from the last probe
        assert [t - last for t in node.gpus.probes[5:]] == [10], node.gpus.probes
    finally:
        node.close()
        node.remove()
