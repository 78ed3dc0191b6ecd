"""deploy/README "Upgrades": a new version may know new keys; the old node.yaml stays valid.

shipped_node_configs/ holds every configs/node.yaml and configs/head.yaml this repository has shipped
(`git show COMMIT:configs/node.yaml`, named by the commit). Each must load with today's schema, and
today's shipped files must be among them: a change to either means adding the new one here."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.configs.loader import load_node

HERE = Path(__file__).parent / "shipped_node_configs"
REPO = Path(__file__).parents[2]
SHIPPED = sorted(HERE.glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_node_config_ever_shipped_loads_today(path: Path) -> None:
    cfg = load_node(path, env={})
    assert cfg.role == ("head" if path.name.startswith("head-") else "compute")


@pytest.mark.parametrize("name", ["node", "head"])
def test_todays_shipped_config_is_kept_for_the_next_upgrade(name: str) -> None:
    today = (REPO / "configs" / f"{name}.yaml").read_text()
    kept = [p.name for p in HERE.glob(f"{name}-*.yaml") if p.read_text() == today]
    assert kept, f"configs/{name}.yaml changed: add it as {HERE.name}/{name}-<commit>.yaml"
