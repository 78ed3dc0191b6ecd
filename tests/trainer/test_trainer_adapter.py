from __future__ import annotations

from lamplighter.configs.schema import JobConfig, TrainerConfig
from lamplighter.rundir import contract
from lamplighter.trainer.adapter import DEFAULT_COMMAND, render_command, trainer_env

KW = dict(replica_id=2, lighthouse="http://h:29510", config_path="/r/job.json", python="/venv/bin/python")


def test_default_command_is_reference_trainer() -> None:
    job = JobConfig(name="j")
    assert render_command(job, **KW) == ["/venv/bin/python", "-m", "lamplighter.trainer", "--config", "/r/job.json"]
    assert DEFAULT_COMMAND[0] == "{python}"


def test_torchtitan_template() -> None:
    job = JobConfig(
        name="titan",
        trainer=TrainerConfig(
            command=[
                "torchrun",
                "--nproc_per_node={nproc_per_node}",
                "-m",
                "torchtitan.train",
                "--fault_tolerance.enable",
                "--fault_tolerance.replica_id={replica_id}",
                "--fault_tolerance.group_size={group_size}",
                "--job.dump_folder={run_dir}/{replica_id}",
            ]
        ),
    )
    argv = render_command(job, **KW)
    assert argv[1] == "--nproc_per_node=1"
    assert "--fault_tolerance.replica_id=2" in argv
    assert "--fault_tolerance.group_size=3" in argv
    assert argv[-1] == "--job.dump_folder=runs/titan/2"


def test_hostile_values_stay_one_argument() -> None:
    hostile = "x; rm -rf / $(id) 'a b' \"c\"\n"
    job = JobConfig(
        name="j", run_dir="/tmp/my run; echo pwned", trainer=TrainerConfig(command=["t", "{run_dir} {config}", "a b"])
    )
    argv = render_command(job, replica_id=0, lighthouse="http://h:1", config_path=hostile, python="py")
    assert argv == ["t", f"/tmp/my run; echo pwned {hostile}", "a b"]


def test_escaped_braces_render_literally() -> None:
    job = JobConfig(name="j", trainer=TrainerConfig(command=["t", "{{replica_id}}={replica_id}"]))
    assert render_command(job, **KW) == ["t", "{replica_id}=2"]


def test_env_contract_timeouts_and_user_override() -> None:
    job = JobConfig(name="j", trainer=TrainerConfig(env={"OMP_NUM_THREADS": "4", "FOO": "bar"}))
    env = trainer_env(job, replica_id=1, attempt=3, lighthouse="http://h:1", config_path="/c.json", run_dir="/r")
    assert env[contract.ENV_REPLICA_ID] == "1"
    assert env[contract.ENV_NUM_GROUPS] == "3"
    assert env[contract.ENV_ATTEMPT] == "3"
    assert env[contract.ENV_RUN_DIR] == "/r"
    assert env[contract.ENV_CONFIG] == "/c.json"
    assert env[contract.ENV_JOB] == "j"
    assert env["TORCHFT_LIGHTHOUSE"] == "http://h:1"
    assert env["TORCHFT_TIMEOUT_SEC"] == "5"
    assert env["TORCHFT_QUORUM_TIMEOUT_SEC"] == "10"
    assert env["TORCHFT_CONNECT_TIMEOUT_SEC"] == "10"
    assert env["OMP_NUM_THREADS"] == "4"
    assert env["FOO"] == "bar"


def test_env_default_threads() -> None:
    env = trainer_env(JobConfig(name="j"), replica_id=0, attempt=0, lighthouse="l", config_path="c", run_dir="r")
    assert env["OMP_NUM_THREADS"] == "1"
