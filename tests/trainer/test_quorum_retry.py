"""A trainer asks again for a quorum that timed out, unless its Lighthouse moved (a restart reads the new address)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from lamplighter.rundir.contract import RunPaths, write_json_atomic
from lamplighter.trainer.main import lighthouse_moved


def run_at(root: Path, asks: str) -> SimpleNamespace:
    return SimpleNamespace(paths=RunPaths(root), ident=SimpleNamespace(lighthouse=asks))


def test_only_a_published_address_other_than_the_one_asked_is_a_move(tmp_path: Path) -> None:
    run = run_at(tmp_path, "http://n1:29510")
    assert not lighthouse_moved(run)  # type: ignore[arg-type]  # nothing published: ask again
    write_json_atomic(RunPaths(tmp_path).lighthouse(), {"address": "http://n1:29510"}, mode=0o644)
    assert not lighthouse_moved(run)  # type: ignore[arg-type]
    write_json_atomic(RunPaths(tmp_path).lighthouse(), {"address": "http://n5:29510"}, mode=0o644)
    assert lighthouse_moved(run)  # type: ignore[arg-type]
