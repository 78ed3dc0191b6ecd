"""Rendered sbatch scripts: readable, shell-safe, and the argv/env arrive intact.

The scripts run under bash with a PATH shim: a fake `srun` that plays one
task (sets SLURM_PROCID etc., then execs what it was given) and a recorder
standing in for the trainer, which writes its argv and environment as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from lamplighter.configs.schema import JobConfig
from lamplighter.slurm.render import RenderError, render_job, sbatch_value
from lamplighter.trainer import contract

RECORDER = """\
import json, os, sys
out = os.environ["RECORD_TO"]
with open(out, "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, f)
"""
FAKE_SRUN = """\
#!/bin/bash
# One task of one node: what srun would set, then run the command.
while [[ "$1" == --* ]]; do shift; done
export SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0 SLURM_NODEID=0
exec "$@"
"""


@pytest.fixture
def harness(tmp_path: Path) -> dict[str, Path]:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "srun").write_text(FAKE_SRUN)
    (shim / "srun").chmod(0o755)
    rec = tmp_path / "recorder.py"
    rec.write_text(RECORDER)
    # A "python" whose sibling torchft_lighthouse is a recorder too.
    (shim / "python").symlink_to(sys.executable)
    lh = shim / "torchft_lighthouse"
    lh.write_text(f"#!{sys.executable}\n{RECORDER}")
    lh.chmod(0o755)
    return {"shim": shim, "recorder": rec, "tmp": tmp_path}


def run_script(script: Path, h: dict[str, Path], extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    out = h["tmp"] / "record.json"
    if out.exists():
        out.unlink()
    env = {
        "PATH": f"{h['shim']}:{os.environ['PATH']}",
        "RECORD_TO": str(out),
        "SLURM_JOB_ID": "4242",
        **(extra_env or {}),
    }
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=10)
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30, cwd=h["tmp"])
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def make_job(h: dict[str, Path], run_dir: Path, args: list[str], env: dict[str, str], **kw: Any) -> JobConfig:
    return JobConfig(
        name="demo",
        run_dir=str(run_dir),
        trainer={"command": ["{python}", str(h["recorder"]), *args, "{replica_id}", "{lighthouse}"], "env": env},
        **kw,
    )


HOSTILE = [
    "it's",
    'say "hi"',
    "`touch {m}`",
    "$(touch {m})",
    "; touch {m}",
    "a && touch {m} || true",
    "$HOME $PATH $((1+1)) ~ * ? [a] '''",
    "new\nline\n",
    "tab\there",
    "back\\slash\\",
    "-" * 5000,
    "",
    " leading and trailing ",
    "ünïcødé ✓",
]


def test_group_script_hostile_values_arrive_intact(harness: dict[str, Path]) -> None:
    marker = harness["tmp"] / "pwned"
    values = [v.replace("{m}", str(marker)) for v in HOSTILE]
    run_dir = harness["tmp"] / "run dir 'quoted' $(touch x) %j"
    env = {f"V{i}": v for i, v in enumerate(values)}
    # Braces are placeholders in command templates: write hostile args without them.
    job = make_job(harness, run_dir, values, env, groups={"count": 2})
    scripts = render_job(job, harness["tmp"] / "out", python=str(harness["shim"] / "python"))
    assert [p.name for p in scripts] == ["lighthouse.sbatch", "group-0.sbatch", "group-1.sbatch"]
    rec = run_script(scripts[2], harness)
    assert not marker.exists()
    assert not (harness["tmp"] / "x").exists()
    assert rec["argv"] == [*values, "1", "http://127.0.0.1:29510"]
    for k, v in env.items():
        assert rec["env"][k] == v
    e = rec["env"]
    assert e[contract.ENV_REPLICA_ID] == "1"
    assert e[contract.ENV_NUM_GROUPS] == "2"
    assert e[contract.ENV_RUN_DIR] == str(run_dir)
    assert e[contract.ENV_CONFIG] == str(run_dir / "job.json")
    assert e[contract.ENV_JOB] == "demo"
    assert e[contract.ENV_ATTEMPT] == "0"
    assert e["TORCHFT_LIGHTHOUSE"] == "http://127.0.0.1:29510"
    assert (e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"], e["GROUP_RANK"]) == ("0", "1", "0", "0")
    assert e["MASTER_PORT"] == "0"  # one process per group: the trainer picks a free port
    assert e["MASTER_ADDR"]
    # The resolved config the trainer reads: valid, with the absolute run_dir.
    resolved = JobConfig.model_validate_json((run_dir / "job.json").read_text())
    assert resolved.run_dir == str(run_dir)
    assert resolved.trainer.env == env


def test_attempt_follows_slurm_restart_count(harness: dict[str, Path]) -> None:
    job = make_job(harness, harness["tmp"] / "run", [], {})
    script = render_job(job, harness["tmp"] / "out", python=str(harness["shim"] / "python"))[1]
    assert run_script(script, harness, {"SLURM_RESTART_COUNT": "3"})["env"][contract.ENV_ATTEMPT] == "3"


def test_sbatch_header(harness: dict[str, Path]) -> None:
    job = make_job(
        harness,
        harness["tmp"] / "r d's %x",
        [],
        {},
        groups={"count": 1, "nodes": 2, "procs_per_node": 4},
        slurm={
            "partition": "gpu",
            "account": "proj-1",
            "time": "1-00:00:00",
            "qos": "high",
            "exclusive": True,
            "constraint": "mi300&ib",
            "extra_sbatch": ["--comment=a,b:c", "--mail-type=NONE", "--hold"],
            "requeue": False,
        },
    )
    text = render_job(job, harness["tmp"] / "out", python=sys.executable)[1].read_text()
    header = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert header == [
        '#SBATCH --job-name="ll-demo-g0"',
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --no-requeue",
        "#SBATCH --open-mode=append",
        f'#SBATCH --output="{harness["tmp"]}/r d\'s %%x/logs/g0-%j.out"',
        '#SBATCH --partition="gpu"',
        '#SBATCH --account="proj-1"',
        '#SBATCH --time="1-00:00:00"',
        '#SBATCH --qos="high"',
        '#SBATCH --constraint="mi300&ib"',
        "#SBATCH --exclusive",
        '#SBATCH --comment="a,b:c"',
        '#SBATCH --mail-type="NONE"',
        "#SBATCH --hold",
    ]
    # Every #SBATCH line comes before the first command (sbatch stops reading at it).
    body = text.splitlines()
    first_cmd = next(i for i, line in enumerate(body) if line and not line.startswith("#"))
    assert max(i for i, line in enumerate(body) if line.startswith("#SBATCH")) < first_cmd
    # Eight ranks on two nodes must agree on the store's port before rank 0 binds it.
    assert 'export MASTER_PORT="$((30000 + SLURM_JOB_ID % 2000))"' in body


def test_values_sbatch_would_misread_are_refused(harness: dict[str, Path]) -> None:
    with pytest.raises(RenderError, match="cannot go into an #SBATCH line"):
        render_job(make_job(harness, harness["tmp"] / 'a"b', [], {}), harness["tmp"] / "out")
    with pytest.raises(RenderError, match="cannot go into"):
        render_job(make_job(harness, harness["tmp"] / "a\\b", [], {}), harness["tmp"] / "out")
    for bad in ("a\nb", "a\rb", "a\x00b"):
        with pytest.raises(RenderError):
            sbatch_value(bad, "x")
    assert not (harness["tmp"] / "out").exists()  # nothing written when refused


def test_schema_refuses_newlines_in_sbatch_fields() -> None:
    for slurm in (
        {"partition": "a\nb"},
        {"extra_sbatch": ["--comment=a\nb"]},
        {"time": "1\n#SBATCH --x"},
        {"constraint": "a\nb"},
        {"head_node": "n1\nn2"},
    ):
        with pytest.raises(ValidationError):
            JobConfig(name="x", slurm=slurm)
    with pytest.raises(ValidationError):
        JobConfig(name="x\ny")


def test_lighthouse_script(harness: dict[str, Path]) -> None:
    job = JobConfig(
        name="demo",
        run_dir=str(harness["tmp"] / "run"),
        slurm={"head_node": "n1"},
        lighthouse={
            "port": 29999,
            "min_replicas": 2,
            "join_timeout_ms": 2000,
            "quorum_tick_ms": 50,
            "heartbeat_timeout_ms": 700,
        },
        groups={"count": 2},
    )
    script = render_job(job, harness["tmp"] / "out", python=str(harness["shim"] / "python"))[0]
    text = script.read_text()
    assert '#SBATCH --nodelist="n1"' in text
    assert '#SBATCH --job-name="ll-demo-lighthouse"' in text
    assert run_script(script, harness)["argv"] == [
        "--bind",
        "[::]:29999",
        "--min_replicas",
        "2",
        "--join_timeout_ms",
        "2000",
        "--quorum_tick_ms",
        "50",
        "--heartbeat_timeout_ms",
        "700",
    ]


def test_head_service_renders_no_lighthouse_job_and_port_zero_is_refused(tmp_path: Path) -> None:
    job = JobConfig(
        name="demo", run_dir=str(tmp_path / "run"), lighthouse={"placement": "head-service"}, groups={"count": 1}
    )
    assert [p.name for p in render_job(job, tmp_path / "out")] == ["group-0.sbatch"]
    with pytest.raises(RenderError, match="port 0"):
        render_job(JobConfig(name="demo", run_dir=str(tmp_path / "run"), lighthouse={"port": 0}), tmp_path / "o2")


def test_relative_run_dir_is_made_absolute(tmp_path: Path) -> None:
    job = JobConfig(name="demo")
    script = render_job(job, tmp_path / "out", base=tmp_path)[1]
    assert f"export {contract.ENV_RUN_DIR}={tmp_path}/runs/demo" in script.read_text()
    assert (tmp_path / "runs" / "demo" / "job.json").exists()
    assert (tmp_path / "runs" / "demo" / "logs").is_dir()


_arg = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00{}"), max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(_arg, max_size=4), val=_arg)
def test_any_text_arrives_intact(harness: dict[str, Path], args: list[str], val: str) -> None:
    job = make_job(harness, harness["tmp"] / "run", args, {"HOSTILE": val})
    script = render_job(job, harness["tmp"] / "out", python=str(harness["shim"] / "python"))[1]
    rec = run_script(script, harness)
    assert rec["argv"][: len(args)] == args
    assert rec["env"]["HOSTILE"] == val
