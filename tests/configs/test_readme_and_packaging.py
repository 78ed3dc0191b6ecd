"""The config reference (docs/config.md) matches the schema, the README stays short, every package folder is installed."""

from __future__ import annotations

import configparser
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from lamplighter.configs.reference import END, START, reference

REPO = Path(__file__).resolve().parents[2]


def test_the_config_reference_is_generated_from_schema() -> None:
    text = (REPO / "docs" / "config.md").read_text()
    assert START in text and END in text
    embedded = START + text.split(START, 1)[1].split(END, 1)[0] + END
    assert embedded == reference(), "docs/config.md's config reference is stale: run `make readme`"


def test_the_readme_is_short_and_its_links_lead_somewhere() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) < 300
    for doc in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
            if not target.startswith("http"):
                assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which does not exist"


def test_readme_opens_with_the_two_commands() -> None:
    head = (REPO / "README.md").read_text()[:3000]
    assert "make demo" in head and "make test" in head


def _plan(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-m", "lamplighter", "plan", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_readmes_payoff_paragraph_quotes_what_plan_prints() -> None:
    """Its numbers are `lamplighter plan`'s, as the paragraph names the commands: a change to the model shows here."""
    head = (REPO / "README.md").read_text()[:6000]
    assert "**Where it pays off, and where it does not.**" in head
    para = head.split("**Where it pays off, and where it does not.**", 1)[1].split("\n\n", 1)[0]
    para = " ".join(para.split())
    printed, gaps, injob = "", [], []
    for model in ("8b", "70b"):
        assert f"`lamplighter plan --model {model} --sweep`" in para
        text = _plan("--model", model, "--sweep")
        printed += text
        rows = {}  # GPUs -> central goodput of lamplighter, ckpt-restart, poll-10s, in-job-restart
        for line in text.splitlines():
            cells = line.split()
            if cells and cells[0].isdigit():
                rows[int(cells[0])] = [float(cells[i]) for i in (2, 4, 6, 8)]
        assert rows, text
        ckpt_ahead = max(n for n, (lam, ckpt, _, _) in rows.items() if ckpt > lam)
        lam_ahead = min(n for n, (lam, ckpt, _, _) in rows.items() if lam > ckpt)
        assert f"ahead up to {ckpt_ahead:,} GPUs" in para and f"ahead from {lam_ahead:,}" in para, (model, rows)
        gaps += [round(lam - poll, 4) for lam, _, poll, _ in rows.values()]
        injob += [round(lam - inj, 4) for lam, _, _, inj in rows.values()]
    quoted = re.findall(r"\b0\.\d{4}\b", para)
    assert quoted, para
    spans = [f"{min(gaps):.4f}", f"{max(gaps):.4f}", f"{min(injob):.4f}", f"{max(injob):.4f}"]
    assert [q for q in quoted if q not in printed] == [s for s in spans if s not in printed], (quoted, spans)
    assert f"within {spans[0]}-{spans[1]} of lamplighter" in para
    assert f"within {spans[2]}-{spans[3]}." in para
    assert "`lamplighter plan --gpus 1024 --model 8b --json`" in para
    central = json.loads(_plan("--gpus", "1024", "--model", "8b", "--json"))["scenarios"]["central"]["strategies"]
    assert f"for {round(central['poll-10s']['hang_out_s']):,} s" in para
    assert f"out for {round(central['lamplighter']['group_out_s'])} s" in para


def test_every_package_folder_is_listed_in_setup_cfg() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    # lamplighter/<folder> links to a top-level folder; walk the package as installed, through its links.
    found = set()
    for init in (REPO / "lamplighter").rglob("__init__.py"):
        rel = init.parent.relative_to(REPO)
        found.add(".".join(rel.parts))
    for link in (REPO / "lamplighter").iterdir():
        if link.is_symlink():
            for init in link.resolve().rglob("__init__.py"):
                rel = init.parent.relative_to(link.resolve())
                found.add(".".join(["lamplighter", link.name, *rel.parts]))
    rig = {p for p in found if p.split(".")[:2] in (["lamplighter", "lab"], ["lamplighter", "gpusim"])}
    assert rig and not rig & listed, f"the rig is not in the wheel: {sorted(rig & listed)}"
    found -= rig
    assert found == listed, f"missing from setup.cfg: {sorted(found - listed)}; stale: {sorted(listed - found)}"
