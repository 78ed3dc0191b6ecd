"""The defaults deploy/README.md states are the ones the code has: each sentence below is looked up in the
README (whitespace as it wraps) and its number compared with the schema's default or the command's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lamplighter.commands.cli import build_parser
from lamplighter.configs.schema import JobConfig, NodeConfig

README = Path(__file__).resolve().parents[2] / "deploy" / "README.md"


def cli_default(command: str, dest: str) -> object:
    return getattr(build_parser().parse_args([command]), dest)


NODE, JOB = NodeConfig(), JobConfig(name="j")
# (what the README says, its numbers as a regex with groups, the defaults they must equal)
STATED = [
    ("metrics address", r"Prometheus on `([\d.]+):(\d+)` by default", (NODE.metrics.host, NODE.metrics.port)),
    ("metrics port", r"`metrics\.port`, (\d+) \|", (NODE.metrics.port,)),
    (
        "resume passes",
        r"`auto_resume\.over_s` apart \((\d+) over (\d+) minutes by default\)",
        (NODE.auto_resume.passes, NODE.auto_resume.over_s / 60),
    ),
    (
        "relapse hold",
        r"`auto_resume\.relapse_hold_s` \((a day)\)",
        ("a day" if NODE.auto_resume.relapse_hold_s == 86_400 else NODE.auto_resume.relapse_hold_s,),
    ),
    ("in-job restarts", r"up to `restart\.in_job` times \((\d+) by default", (JOB.restart.in_job,)),
    ("head poll", r"`slurm_poll_s` \((\d+) s\)", (NODE.slurm_poll_s,)),
    ("probe sweep", r"`head_probe_sweep` \((\d+)\)", (NODE.head_probe_sweep,)),
    ("check deadline", r"`--deadline` \(default (\d+) s\)", (cli_default("healthcheck", "deadline"),)),
]


@pytest.mark.parametrize(("what", "pattern", "defaults"), STATED, ids=[s[0] for s in STATED])
def test_each_default_deploy_readme_states_is_the_codes(what: str, pattern: str, defaults: tuple[object, ...]) -> None:
    text = " ".join(README.read_text().split())
    m = re.search(pattern, text)
    assert m is not None, f"deploy/README.md no longer says the {what} default as {pattern!r}: update this test"
    said = tuple(float(g) if g.replace(".", "").isdigit() and g.count(".") < 2 else g for g in m.groups())
    assert said == tuple(float(d) if isinstance(d, int | float) else d for d in defaults), what
