"""Fixtures shared across test folders: the simulated libamd_smi.so (built once per session) and a fresh
8-GPU state folder. Fixtures of one area live in that folder's own conftest. And the order tests start in
when they run side by side (`make test`: pytest-xdist): the heaviest first, so that the last to finish is a
short one."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from netns_links import make_netns

from lamplighter.gpusim.build import ensure_built, sim_env
from lamplighter.gpusim.state import StateDir

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The benchmark package: it sits at the repository's top and is not installed."""
    monkeypatch.syspath_prepend(str(REPO))
    return importlib.import_module("bench")


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace with a veth pair lla0 <-> llb0, both up (tests/netns_links.py)."""
    yield from make_netns()


@pytest.fixture(scope="session")
def gpusim_root() -> Path:
    return ensure_built().parent.parent


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    sd = StateDir(tmp_path / "gpus")
    sd.init(8)
    return sd


@pytest.fixture
def sim_env_for(gpusim_root: Path, state: StateDir) -> dict[str, str]:
    return sim_env(gpusim_root, state.root)


@pytest.fixture
def run_amdsmi(sim_env_for: dict[str, str]) -> Callable[[str], Any]:
    """Run a snippet that imports the real amdsmi in a child process (it binds the library at import);
    the snippet sets `out`, which comes back as JSON."""

    def run(code: str) -> Any:
        script = "import json, amdsmi\nfrom amdsmi import *\n" + textwrap.dedent(code) + "\nprint(json.dumps(out))\n"
        proc = subprocess.run(
            [sys.executable, "-c", script], env=sim_env_for, capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Heavy tests (the `heavy` mark, longest first), then the other integration tests, then the unit tests.

    With `--dist loadgroup` each worker takes the next test in this order when it is free, so the long runs
    overlap each other and the short tests fill the gaps at the end."""

    def rank(item: pytest.Item) -> tuple[float, bool]:
        heavy = item.get_closest_marker("heavy")
        seconds = float(heavy.kwargs.get("seconds", 60)) if heavy else 0.0
        return (-seconds, item.get_closest_marker("integration") is None)

    items.sort(key=rank)
