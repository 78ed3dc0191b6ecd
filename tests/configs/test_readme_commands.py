"""The README's and docs' `lamplighter ...` commands parse as written, and the 5 torchtitan steps run as written.

Names of a command in prose (`lamplighter hosts roles`) are not commands: they are listed in MENTIONS with
what the full command needs, so a new one is a decision, not an accident."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from lamplighter.commands.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MENTIONS = {
    "lamplighter hosts roles": "--config node.yaml",
    "lamplighter hosts out": "--config node.yaml and a host",
    "lamplighter local --baseline auto": "a config",
    "lamplighter plan --gpus N --model M": "numbers",
}


def commands(text: str) -> list[str]:
    """`lamplighter <command> <more>` in backticks or at a line's start, without comments, redirects and
    [optional] parts; usage lines (PLACEHOLDERS, a|b) and a bare command name are not commands."""
    found = re.findall(r"`(lamplighter\s[^`]+)`", text) + re.findall(r"^(lamplighter .*)$", text, re.M)
    subs = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    out = []
    for c in found:
        c = " ".join(c.split()).split(" #")[0].split(" > ")[0].split(" | ")[0].strip()
        while re.search(r"\[[^\[\]]*\]", c):
            c = re.sub(r"\s*\[[^\[\]]*\]", "", c)
        words = c.split()
        usage = "..." in c or re.search(r"\b[A-Z]{2,}\b|\w\|\w", c)  # USAGE words, a|b alternatives
        if len(words) >= 3 and words[1] in subs and not usage:
            out.append(c)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_command_in_the_docs_parses_as_written(doc: Path) -> None:
    bad = []
    for c in commands(doc.read_text()):
        if c in MENTIONS:
            continue
        try:
            build_parser().parse_args(shlex.split(c)[1:])
        except SystemExit:
            bad.append(c)
    assert bad == [], f"{doc.name}: these commands do not parse as written"


def test_the_readmes_torchtitan_steps_2_to_4_run_as_written(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    steps = readme.split("## Your torchtitan job on Slurm in 5 steps", 1)[1].split("\n## ", 1)[0]
    wanted = [c for c in commands(steps) if c.split()[1] in ("init", "validate", "render")]
    assert [c.split()[1] for c in wanted] == ["init", "validate", "render"], wanted
    node = tmp_path / "etc" / "node.yaml"  # the README's /etc/lamplighter/node.yaml, here
    node.parent.mkdir()
    node.write_bytes((REPO / "configs" / "node.yaml").read_bytes())
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for c in wanted:
        argv = [a.replace("/etc/lamplighter/node.yaml", str(node)) for a in shlex.split(c)[1:]]
        out = subprocess.run(
            [sys.executable, "-m", "lamplighter", *argv], cwd=work, env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, f"{c}: {out.stdout}{out.stderr}"
    written = sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())
    assert "llama3-8b.yaml" in written and "llama3_8b_ft.py" in written
    assert [w for w in written if not w.startswith("sbatch/")] == ["llama3-8b.yaml", "llama3_8b_ft.py"]
    assert any(w.endswith(".sbatch") or w.endswith(".sh") for w in written if w.startswith("sbatch/")), written
