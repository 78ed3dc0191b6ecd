"""Per-rank launch environment, and the real Lighthouse kept on one port across a restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lamplighter.configs.schema import JobConfig
from lamplighter.launch.group import group_launch
from lamplighter.lighthouse.spawn import Lighthouse, LighthouseError
from lamplighter.system.ports import accepts_connections


def test_each_rank_gets_its_identity_and_quorum_retries(tmp_path: Path) -> None:
    job = JobConfig.model_validate(
        {"name": "j", "groups": {"count": 2, "procs_per_node": 2}, "trainer": {"env": {"FOO": "bar"}}}
    )
    argv, envs = group_launch(
        job,
        group=1,
        attempt=3,
        lighthouse="http://127.0.0.1:1",
        config_path=tmp_path / "job.json",
        run_dir=tmp_path,
        python="/py",
        base_env={"PATH": "/bin", "RANK": "9"},
    )
    assert argv[0][:2] == ["/py", "-m"] and argv[0] == argv[1]
    assert [(e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"]) for e in envs] == [("0", "2", "0"), ("1", "2", "1")]
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"] != "0"
    assert envs[0]["LAMPLIGHTER_ATTEMPT"] == "3" and envs[0]["FOO"] == "bar" and envs[0]["PATH"] == "/bin"
    assert envs[0]["TORCHFT_QUORUM_RETRIES"] == str(job.torchft.quorum_retries)
    single = JobConfig.model_validate({"name": "j", "trainer": {"env": {"TORCHFT_QUORUM_RETRIES": "0"}}})
    _, envs = group_launch(
        single, group=0, attempt=0, lighthouse="x", config_path=tmp_path, run_dir=tmp_path, python="/py", base_env={}
    )
    assert envs[0]["TORCHFT_QUORUM_RETRIES"] == "0"


def test_a_one_process_group_gets_a_real_port(tmp_path: Path) -> None:
    """MASTER_PORT=0 let the reference trainer pick one, but a trainer that gives it to torch.distributed as it
    is (torchtitan without torchrun) then has its store client wait on port 0: no step ever."""
    single = JobConfig.model_validate({"name": "j"})
    ports = set()
    for g in range(2):
        _, envs = group_launch(
            single,
            group=g,
            attempt=0,
            lighthouse="x",
            config_path=tmp_path,
            run_dir=tmp_path,
            python="/py",
            base_env={},
        )
        assert envs[0]["WORLD_SIZE"] == "1"
        ports.add(int(envs[0]["MASTER_PORT"]))
    assert 0 not in ports


def test_lighthouse_restarts_on_the_same_port(tmp_path: Path) -> None:
    job = JobConfig.model_validate({"name": "j", "lighthouse": {"port": 0}})
    lh = Lighthouse(job.lighthouse, tmp_path / "lh.log")
    try:
        lh.start(time.time())
        lh.wait_ready(60)
        port = lh.port
        assert accepts_connections("127.0.0.1", port)
        lh.kill()
        assert lh.popen is not None and lh.popen.returncode == -9
        lh.start(time.time())
        lh.wait_ready(60)
        assert lh.port == port and lh.address == f"http://127.0.0.1:{port}"
    finally:
        lh.kill()
    assert "Lighthouse listening" in (tmp_path / "lh.log").read_text()


def test_lighthouse_that_cannot_start_says_why(tmp_path: Path) -> None:
    job = JobConfig.model_validate({"name": "j", "lighthouse": {"port": 0}})
    lh = Lighthouse(job.lighthouse, tmp_path / "lh.log", command=["/bin/false"])
    lh.start(time.time())
    with pytest.raises(LighthouseError, match="exited"):
        lh.wait_ready(30)
    lh.kill()
