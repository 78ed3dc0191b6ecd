"""The real torchtitan 0.3 (PyPI) in the lab's environment of its own: built once per machine (`make titan-env`,
which `make test` runs first; a test run without it builds it here, which takes minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.lab.torchtitan_env import TitanEnv, ensure

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def titan_env() -> TitanEnv:
    return ensure(REPO / "build" / "torchtitan-env")
