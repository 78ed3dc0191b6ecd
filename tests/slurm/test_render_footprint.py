"""What rendering leaves on a cluster: nothing outside --out, the helpers' interpreter the job names, and a
Lighthouse job placed by its own partition, account, qos and features (#29, "a footprint admins accept")."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from test_slurm_render import harness, make_job, run_script  # noqa: F401  (the fixture)

from lamplighter.commands.render import add_parser, run
from lamplighter.configs.schema import JobConfig
from lamplighter.slurm.submit.render import render_job

HOSTILE_DIR = "env $(touch pwned) 'q' \"d\" ;x"


def header(script: Path) -> list[str]:
    return [line for line in script.read_text().splitlines() if line.startswith("#SBATCH")]


def cli_render(args: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers())
    ns = ap.parse_args(["render", *args])
    return int(run(ns))


def test_render_touches_only_out(tmp_path: Path) -> None:
    run_dir = tmp_path / "shared" / "runs" / "x"
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"name: x\nrun_dir: {shlex.quote(str(run_dir))}\ngroups: {{count: 2}}\n")
    assert cli_render([str(cfg), "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "group-0.sbatch",
        "group-1.sbatch",
        "lighthouse.sbatch",
    ]
    assert not (tmp_path / "shared").exists()  # no <run_dir>/job.json, no logs/
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml", "out"]


def test_helpers_run_the_interpreter_the_job_names(harness: dict[str, Path]) -> None:  # noqa: F811
    odd = harness["tmp"] / HOSTILE_DIR / "bin"
    odd.mkdir(parents=True)
    helper = odd / "python3"
    record = harness["tmp"] / "helper-calls.txt"
    helper.write_text(
        f'#!/bin/bash\nprintf "%s\\n" "$2" >> {shlex.quote(str(record))}\nexec {shlex.quote(sys.executable)} "$@"\n'
    )
    helper.chmod(0o755)
    job = make_job(harness, harness["tmp"] / "run", ["a"], {}, slurm={"helper_python": str(helper), "time": "01:00:00"})
    job.trainer.python = sys.executable  # the trainer's {python}: its own environment's
    scripts = render_job(job, harness["tmp"] / "out", python="/login/venv/bin/python")
    lighthouse, group = (p.read_text() for p in scripts[:2])
    quoted = shlex.quote(str(helper))
    for module in (
        "lamplighter.lighthouse.main",
        "lamplighter.slurm.submit.release",
        "lamplighter.slurm.injob.renew",
    ):
        assert f"{quoted} -m {module}" in lighthouse, module
    assert (
        f"{quoted} -m lamplighter.slurm.injob.agent" in group and f"{quoted} -m lamplighter.slurm.injob.renew" in group
    )
    assert "/login/venv/bin/python -m lamplighter" not in lighthouse + group  # the submitting one only for {python}
    # The hostile path runs as one word: the agent starts through it and nothing else is run.
    rec = run_script(scripts[1], harness)
    assert rec["argv"][0] == "a"
    assert record.read_text().splitlines() == ["lamplighter.slurm.injob.agent"]
    assert not (harness["tmp"] / "pwned").exists() and not Path("pwned").exists()


def test_helpers_default_to_the_submitting_interpreter(tmp_path: Path) -> None:
    job = JobConfig(name="d", run_dir=str(tmp_path / "run"))
    text = render_job(job, tmp_path / "out")[0].read_text()
    assert f"{shlex.quote(sys.executable)} -m lamplighter.lighthouse.main" in text


@pytest.mark.parametrize("bad", ["", " ", "a\nb", "py\x00", " /usr/bin/python3"])
def test_helper_python_refuses_what_is_no_interpreter(bad: str) -> None:
    with pytest.raises(ValidationError, match="helper_python"):
        JobConfig(name="d", slurm={"helper_python": bad})


def test_lighthouse_job_has_its_own_placement_and_never_the_gpu_features(tmp_path: Path) -> None:
    gpu = {"partition": "mi325x", "account": "proj", "qos": "high", "constraint": "mi325x&ib", "head_node": "head01"}
    default = render_job(JobConfig(name="d", run_dir=str(tmp_path / "a"), slurm=gpu), tmp_path / "o1")
    lh, group = header(default[0]), header(default[1])
    # Today's placement, minus the groups' GPU features: the head node need not have them.
    assert '#SBATCH --partition="mi325x"' in lh and '#SBATCH --account="proj"' in lh and '#SBATCH --qos="high"' in lh
    assert not any("--constraint" in line for line in lh) and '#SBATCH --constraint="mi325x&ib"' in group
    own = {
        **gpu,
        "lighthouse_partition": "service",
        "lighthouse_account": "ops",
        "lighthouse_qos": "low",
        "lighthouse_constraint": "cpu|head",
    }
    scripts = render_job(JobConfig(name="d", run_dir=str(tmp_path / "b"), slurm=own), tmp_path / "o2")
    lh, group = header(scripts[0]), header(scripts[1])
    assert [
        line for line in lh if line.split("=")[0].split()[-1] in ("--partition", "--account", "--qos", "--constraint")
    ] == [
        '#SBATCH --partition="service"',
        '#SBATCH --account="ops"',
        '#SBATCH --qos="low"',
        '#SBATCH --constraint="cpu|head"',
    ]
    assert '#SBATCH --partition="mi325x"' in group and '#SBATCH --qos="high"' in group


@pytest.mark.parametrize(
    "key,bad",
    [
        ("lighthouse_partition", 'a"b'),
        ("lighthouse_account", "a b"),
        ("lighthouse_qos", "$(x)"),
        ("lighthouse_constraint", "a\nb"),
    ],
)
def test_lighthouse_placement_refuses_what_sbatch_would_misread(key: str, bad: str) -> None:
    with pytest.raises(ValidationError, match=key):
        JobConfig(name="d", slurm={key: bad})


def test_dependency_is_lamplighters_own(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="--dependency"):
        JobConfig(name="d", slurm={"extra_sbatch": ["--dependency=afterok:1"]})
