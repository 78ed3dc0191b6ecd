"""torchtitan's flags rendered from a job's settings, checked against torchtitan's own config classes.

`torchtitan_fields.json` holds the fields of torchtitan 0.3's fault-tolerant
trainer config, extracted from its wheel by tools/torchtitan_fields.py (so this
runs offline); every `--section.field` the llama3 example renders must be one of
them, booleans as bare flags and other fields with a value of their type.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from lamplighter.configs.loader import load_job
from lamplighter.configs.schema import JobConfig
from lamplighter.configs.torchtitan_flags import OWNED_FLAGS, flag_path
from lamplighter.trainer.adapter import render_command, trainer_env

REPO = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((Path(__file__).parent / "torchtitan_fields.json").read_text())
EXAMPLE = REPO / "configs" / "llama3-8b-mi325x.yaml"
TORCHTITAN_CONFIG = REPO / "configs" / "torchtitan" / "llama3_8b_ft.py"
# Read by torchtitan's ConfigManager itself, before tyro sees the rest.
CONFIG_MANAGER_FLAGS = {"module", "config"}

sys.path.insert(0, str(REPO / "tools"))
import torchtitan_fields  # noqa: E402


def field_type(path: str) -> str:
    section, _, name = path.rpartition(".")
    if not section:
        return str(FIXTURE["top_level"][name])
    return str(FIXTURE["sections"][section]["fields"][name])


def check_flag(arg: str) -> None:
    """One torchtitan argument is a field of its config classes, written the way tyro parses that field."""
    path = flag_path(arg)
    assert path is not None, arg
    if path in CONFIG_MANAGER_FLAGS:
        assert "=" in arg, arg
        return
    section, _, name = path.rpartition(".")
    if section:
        assert section in FIXTURE["sections"], f"{arg}: torchtitan has no config section {section!r}"
        fields = FIXTURE["sections"][section]["fields"]
        assert name in fields, f"{arg}: {FIXTURE['sections'][section]['class']} has no field {name!r}"
    else:
        assert name in FIXTURE["top_level"], f"{arg}: torchtitan's trainer config has no field {name!r}"
    kind = field_type(path)
    if kind == "bool":
        assert "=" not in arg, f"{arg}: tyro takes a bool field as a bare flag"
        return
    assert "=" in arg, f"{arg}: {kind} field without a value"
    value = arg.split("=", 1)[1]
    if kind == "int":
        int(value)
    elif kind.startswith("Literal["):
        assert value in ast.literal_eval(kind[len("Literal") :].replace("[", "(", 1)[:-1] + ",)"), arg


def torchtitan_args(argv: list[str]) -> list[str]:
    return argv[argv.index("torchtitan.train") + 1 :]


def rendered(job: JobConfig, replica_id: int) -> list[str]:
    return render_command(job, replica_id=replica_id, lighthouse="http://head01:29510", config_path="/c", python="/py")


def test_fixture_is_torchtitans_fault_tolerant_trainer_config() -> None:
    assert FIXTURE["root"] == "torchtitan.experiments.torchft.trainer.FaultTolerantTrainer.Config"
    s = FIXTURE["sections"]
    assert s["checkpoint"]["class"] == "torchtitan.experiments.torchft.checkpoint.TorchFTCheckpointManager.Config"
    assert s["fault_tolerance"]["class"] == "torchtitan.experiments.torchft.config.job_config.FaultTolerance"
    assert s["training"]["class"] == "torchtitan.config.configs.TrainingConfig"
    for path in OWNED_FLAGS:
        field_type(path)  # every flag lamplighter owns is a field torchtitan has


def test_llama3_example_renders_every_setting_as_torchtitans_flags() -> None:
    job = load_job(EXAMPLE)
    assert job.trainer.resolved_kind == "torchtitan"
    for rid in range(job.groups.count):
        argv = rendered(job, rid)
        args = torchtitan_args(argv)
        for arg in args:
            check_flag(arg)
        # Each job setting torchtitan needs, exactly once.
        want = [
            "--fault_tolerance.enable",
            f"--fault_tolerance.replica_id={rid}",
            "--fault_tolerance.group_size=8",
            "--fault_tolerance.min_replica_size=2",
            "--fault_tolerance.process_group=nccl",
            "--fault_tolerance.process_group_timeout_ms=60000",
            "--training.steps=100000",
            "--checkpoint.enable",
            "--checkpoint.enable_ft_dataloader_checkpoints",
            "--dump_folder=/shared/runs/llama3-8b/torchtitan",
        ]
        for w in want:
            assert args.count(w) == 1, (w, args)
        assert len({flag_path(a) for a in args}) == len(args), "a flag given twice"
        # torchrun: one rank per GPU on each of the group's nodes; the container's python.
        assert argv[:6] == ["python3", "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=8", *argv[5:6]]
        assert f"--rdzv_id=llama3-8b-{rid}" in argv
        env = trainer_env(
            job, replica_id=rid, attempt=0, lighthouse="http://head01:29510", config_path="/c", run_dir="/r"
        )
        assert (env["REPLICA_GROUP_ID"], env["NUM_REPLICA_GROUPS"]) == (str(rid), "8")
        assert env["TORCHFT_LIGHTHOUSE"] == "http://head01:29510"


def test_example_torchtitan_config_builds_the_classes_the_flags_are_checked_against() -> None:
    """configs/torchtitan/llama3_8b_ft.py returns the root config with the fixture's section classes."""
    tree = ast.parse(TORCHTITAN_CONFIG.read_text())
    imports = {
        a.asname or a.name: f"{n.module}.{a.name}"
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }

    def qualified(expr: ast.expr) -> str:
        text = ast.unparse(expr)
        head, _, rest = text.partition(".")
        return imports[head] + (f".{rest}" if rest else "")

    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "llama3_8b_ft")
    ret = next(n for n in ast.walk(fn) if isinstance(n, ast.Return))
    assert isinstance(ret.value, ast.Call)
    assert qualified(ret.value.func) == FIXTURE["root"]
    built = {kw.arg: kw.value for kw in ret.value.keywords}
    for section in ("checkpoint", "fault_tolerance", "training"):
        call = built[section]
        assert isinstance(call, ast.Call)
        sec = FIXTURE["sections"][section]
        assert qualified(call.func) in [sec["class"], *sec["also_importable_as"]], section
    # Per-step fault tolerance: no DiLoCo / local SGD.
    ft = built["fault_tolerance"]
    assert isinstance(ft, ast.Call) and "semi_sync_method" not in {kw.arg for kw in ft.keywords}


def torchtitan_job(command: list[str], **trainer: Any) -> JobConfig:
    return JobConfig(
        name="tt",
        run_dir="/runs/tt",
        trainer={"kind": "torchtitan", "command": command, **trainer},
        groups={"count": 3, "gpus_per_node": 0},
        lighthouse={"min_replicas": 2},
        torchft={"pg_timeout_s": 4, "timeout_s": 5},
    )


BASE = ["{python}", "-m", "torchtitan.train", "--module=torchft.llama3", "--config=llama3_torchft_debugmodel"]


@pytest.mark.parametrize(
    "arg",
    [
        "--fault_tolerance.replica_id=1",
        "--fault-tolerance.group-size=3",
        "--fault_tolerance.enable",
        "--fault_tolerance.process_group=gloo",
        "--training.steps=5",
        "--checkpoint.no-enable",
        "--checkpoint.enable_ft_dataloader_checkpoints",
    ],
)
def test_a_flag_lamplighter_sets_cannot_also_be_typed(arg: str) -> None:
    with pytest.raises(ValidationError, match="which lamplighter renders from"):
        torchtitan_job([*BASE, arg])


def test_users_own_flags_stay_and_dump_folder_wins() -> None:
    job = torchtitan_job([*BASE, "--dump_folder=/mine", "--training.local_batch_size=2"])
    args = torchtitan_args(rendered(job, 2))
    assert "--dump_folder=/mine" in args and not any(a.startswith("--dump_folder=/runs") for a in args)
    assert "--training.local_batch_size=2" in args
    # CPU groups: gloo; the process-group timeout in milliseconds.
    assert "--fault_tolerance.process_group=gloo" in args
    assert "--fault_tolerance.process_group_timeout_ms=4000" in args
    assert "--fault_tolerance.replica_id=2" in args and "--fault_tolerance.group_size=3" in args
    for arg in args:
        check_flag(arg)


def test_checkpointing_is_rendered_even_without_the_dataloader_checkpoint() -> None:
    """Without --checkpoint.enable torchtitan registers no state-dict function with torchft, and the replica
    that sends a heal dies ("user state_dict is not initialized"): it is always on, and the job's to set."""
    job = torchtitan_job(BASE, torchtitan={"dataloader_checkpoint": False})
    args = torchtitan_args(rendered(job, 0))
    assert args.count("--checkpoint.enable") == 1
    # torchtitan's default for the dataloader checkpoint is on: off is said.
    assert "--checkpoint.no_enable_ft_dataloader_checkpoints" in args
    with pytest.raises(ValidationError, match=r"--checkpoint\.enable.*healing needs it"):
        torchtitan_job([*BASE, "--checkpoint.enable"], torchtitan={"dataloader_checkpoint": False})


def test_lamplighters_launch_runs_the_module_the_command_names() -> None:
    job = torchtitan_job(BASE)
    argv = rendered(job, 0)
    i = argv.index("lamplighter_torchtitan")
    assert argv[i - 1] == "-m" and argv[i + 1] == "torchtitan.train"
    assert argv.count("-m") == BASE.count("-m")  # torchrun's own -m is left alone
    with pytest.raises(ValidationError, match=r"must run torchtitan as a module"):
        torchtitan_job(["{python}", "-m", "torch.distributed.run", "train.py"])


def test_torchtitan_kind_needs_a_command_and_python_is_the_trainers() -> None:
    with pytest.raises(ValidationError, match=r"needs trainer\.command"):
        JobConfig(name="x", trainer={"kind": "torchtitan"})
    job = torchtitan_job(BASE, python="/opt/venv/bin/python")
    assert rendered(job, 0)[0] == "/opt/venv/bin/python"
    assert JobConfig(name="x").trainer.resolved_kind == "reference"
    assert JobConfig(name="x", trainer={"command": ["a"]}).trainer.resolved_kind == "custom"
    with pytest.raises(ValidationError, match="gpus_per_node"):
        JobConfig(name="x", trainer={"command": ["torchrun", "--nproc_per_node={gpus_per_node}"]})


def test_flag_path_reads_tyros_spellings() -> None:
    assert flag_path("--fault-tolerance.replica-id=3") == "fault_tolerance.replica_id"
    assert flag_path("--checkpoint.no-enable") == "checkpoint.enable"
    assert flag_path("--dump_folder=/x") == "dump_folder"
    assert flag_path("torchtitan.train") is None and flag_path("--") is None


SYNTHETIC = {
    "torchtitan/__init__.py": "",
    "torchtitan/config/__init__.py": "from .configs import TrainingConfig\nfrom .configurable import Configurable\n",
    "torchtitan/config/configurable.py": "class Configurable:\n    class Config:\n        pass\n",
    "torchtitan/config/configs.py": (
        "from dataclasses import dataclass\n"
        "@dataclass\nclass TrainingConfig:\n    steps: int = 10\n    _private: int = 0\n"
    ),
    "torchtitan/ckpt.py": (
        "from torchtitan.config import Configurable\n"
        "class Base(Configurable):\n    class Config(Configurable.Config):\n        enable: bool = False\n"
        "class Ckpt(Base):\n    class Config(Base.Config):\n        folder: str = 'c'\n"
    ),
    "torchtitan/trainer.py": (
        "from typing import Annotated\nimport tyro\nfrom dataclasses import field\n"
        "from torchtitan.config import TrainingConfig, Configurable\nfrom torchtitan.ckpt import Base, Ckpt\n"
        "class Trainer(Configurable):\n    class Config(Configurable.Config):\n"
        "        spec: Annotated[object | None, tyro.conf.Suppress] = None\n"
        "        dump_folder: str = './outputs'\n"
        "        training: TrainingConfig = field(default_factory=TrainingConfig)\n"
        "        checkpoint: Base.Config = field(default_factory=Base.Config)\n"
    ),
    "torchtitan/ft/__init__.py": "",
    "torchtitan/ft/trainer.py": (
        "from torchtitan.trainer import Trainer\nfrom .ft import FT\n"
        "class FTTrainer(Trainer):\n    class Config(Trainer.Config):\n        fault_tolerance: FT\n"
    ),
    "torchtitan/ft/ft.py": "class FT:\n    enable: bool = False\n    replica_id: int = 0\n",
    "torchtitan/ft/registry.py": (
        "from torchtitan.ckpt import Ckpt\nfrom .trainer import FTTrainer\n"
        "def debug():\n    return FTTrainer.Config(checkpoint=Ckpt.Config(folder='x'))\n"
    ),
}


def test_extractor_follows_bases_reexports_defaults_and_the_registry() -> None:
    out = torchtitan_fields.extract(
        SYNTHETIC, root="torchtitan.ft.trainer.FTTrainer.Config", registry="torchtitan.ft.registry.debug"
    )
    assert out["top_level"] == {"dump_folder": "str"}  # `spec` is Suppress-ed: not a flag
    s = out["sections"]
    assert s["training"] == {
        "class": "torchtitan.config.configs.TrainingConfig",
        "also_importable_as": ["torchtitan.config.TrainingConfig"],
        "fields": {"steps": "int"},
    }
    # As the registry builds it (Ckpt.Config), with the fields of its bases.
    assert s["checkpoint"]["class"] == "torchtitan.ckpt.Ckpt.Config"
    assert s["checkpoint"]["fields"] == {"enable": "bool", "folder": "str"}
    assert s["fault_tolerance"]["fields"] == {"enable": "bool", "replica_id": "int"}


def test_comm_timeouts_must_outlast_a_recovery() -> None:
    """A rank still healing (or in a cross-group collective) holds its group's others in their next collective:
    torchtitan's comm timeouts below torchft's kill the group during a recovery."""
    torchtitan_job([*BASE, "--comm.train_timeout_seconds=100", "--comm.init_timeout_seconds=300"])
    with pytest.raises(ValidationError, match=r"--comm\.train_timeout_seconds=5 s, but a rank can wait 5 s"):
        torchtitan_job([*BASE, "--comm.train_timeout_seconds=5"])
    with pytest.raises(ValidationError, match=r"--comm\.init_timeout_seconds=20 s.*set --comm\.init_timeout_seconds"):
        torchtitan_job([*BASE, "--comm.init-timeout-seconds", "20"])
    slow = {"pg_timeout_s": 60, "timeout_s": 120, "quorum_timeout_s": 180}

    def slow_job(command: list[str]) -> JobConfig:
        return JobConfig(
            name="tt",
            trainer={"kind": "torchtitan", "command": command},
            torchft=slow,
            health={"hang_timeout_s": 600, "startup_timeout_s": 1200},
        )

    # Not typed: the --config module's value or torchtitan's default, which validation cannot see.
    slow_job(BASE)
    with pytest.raises(ValidationError, match=r"train_timeout_seconds=100 s, but a rank can wait 120 s"):
        slow_job([*BASE, "--comm.train_timeout_seconds=100"])
    slow_job([*BASE, "--comm.train_timeout_seconds=130", "--comm.init_timeout_seconds=400"])
