"""The config reference (docs/config.md) matches the schema, the README stays short, every package folder is installed."""

from __future__ import annotations

import configparser
import re
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
    assert found == listed, f"missing from setup.cfg: {sorted(found - listed)}; stale: {sorted(listed - found)}"
