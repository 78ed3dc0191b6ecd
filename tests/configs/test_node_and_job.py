"""Rules between a node config and a job config: the daemon applies the job's thresholds at the node's pace."""

from __future__ import annotations

import pytest

from lamplighter.configs.schema import JobConfig, NodeConfig, ignored_off_local, node_job_problems

HEAD = NodeConfig(role="head", gpus=False)


def job(**kw: object) -> JobConfig:
    return JobConfig.model_validate({"name": "j", **kw})


def test_a_fitting_pair_breaks_nothing() -> None:
    assert node_job_problems(NodeConfig(), job()) == []
    assert node_job_problems(HEAD, job()) == []


def test_node_pace_against_the_jobs_hang_timeout() -> None:
    node = NodeConfig(health={"poll_interval_s": 2, "probe_deadline_s": 6})
    tight = job(health={"hang_timeout_s": 11}, torchft={"quorum_timeout_s": 10})
    assert node_job_problems(node, tight) == []
    problems = node_job_problems(node, job(health={"hang_timeout_s": 6}, torchft={"quorum_timeout_s": 5}))
    assert len(problems) == 1 and problems[0].startswith("node health.probe_deadline_s (6 s) must be below")
    problems = node_job_problems(
        NodeConfig(health={"poll_interval_s": 3}), job(health={"hang_timeout_s": 5.5}, torchft={"quorum_timeout_s": 5})
    )
    assert len(problems) == 1 and "poll_interval_s (3 s) must be at most half" in problems[0]


def test_restart_grace_fits_under_a_short_quorum_timeout() -> None:
    """CI finding: a fixed 2 s grace made every config with quorum_timeout_s 2 invalid."""
    from lamplighter.configs.schema import JobConfig

    assert JobConfig.model_validate({"name": "j"}).lighthouse.restart_grace_ms == 2000
    short = JobConfig.model_validate({"name": "j", "torchft": {"quorum_timeout_s": 2}})
    assert short.lighthouse.restart_grace_ms == 500  # 2000 - 500 (heartbeat) - 500 - 1000 (restart): the floor
    again = JobConfig.model_validate(short.model_dump())  # job.json round trip: the value is explicit now
    assert again.lighthouse.restart_grace_ms == 500
    # CI finding: a 3 s quorum timeout expired behind a 2 s grace plus the Lighthouse's 0.45 s restart.
    lab = JobConfig.model_validate({"name": "j", "torchft": {"quorum_timeout_s": 3}})
    assert lab.lighthouse.restart_grace_ms == 1000
    with pytest.raises(ValueError, match="restart_grace_ms"):
        JobConfig.model_validate(
            {"name": "j", "torchft": {"quorum_timeout_s": 2}, "lighthouse": {"restart_grace_ms": 1600}}
        )


def test_submit_names_the_local_only_settings_it_will_not_honour() -> None:
    assert ignored_off_local(job()) == []
    [note] = ignored_off_local(job(restart={"standby": 2}))
    assert note.startswith("restart.standby (2) applies to `lamplighter local` only")
