"""The lab's `cluster` and the product's `render` subcommands through argparse, as their entries wire them."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from realparts import require_slurm

from lamplighter.commands import render as render_cli
from lamplighter.lab import cluster_cli
from lamplighter.lab.testcluster import is_alive


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lamplighter")
    sub = parser.add_subparsers(dest="command", required=True)
    cluster_cli.add_parser(sub)
    render_cli.add_parser(sub)
    return parser.parse_args(list(argv))


def test_render_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"name: clijob\nrun_dir: {tmp_path / 'run'}\ngroups:\n  count: 2\n")
    args = parse("render", str(cfg), "--out", str(tmp_path / "out"))
    assert args.func(args) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "group-0.sbatch",
        "group-1.sbatch",
        "lighthouse.sbatch",
    ]
    assert "group-1.sbatch" in capsys.readouterr().out
    cfg.write_text("name: clijob\ngroups:\n  count: nope\n")
    assert args.func(args) == 2
    assert "job.yaml" in capsys.readouterr().err


@pytest.mark.integration
def test_cluster_cli_up_status_crash_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_slurm()
    d = str(tmp_path / "c")
    up = parse("cluster", "up", "--dir", d, "--nodes", "2")
    try:
        assert up.func(up) == 0
        assert f"export SLURM_CONF={tmp_path / 'c' / 'slurm.conf'}" in capsys.readouterr().out
        crash = parse("cluster", "crash-node", "n2", "--dir", d)
        assert crash.func(crash) == 0
        st = parse("cluster", "status", "--dir", d)
        assert st.func(st) == 0
        out = capsys.readouterr().out
        assert '"node-n2"' in out and '"alive": false' in out
        again = parse("cluster", "restart-node", "n2", "--dir", d)
        assert again.func(again) == 0
        bad = parse("cluster", "crash-node", "--dir", d)
        assert bad.func(bad) == 2
    finally:
        down = parse("cluster", "down", "--dir", d)
        assert down.func(down) == 0
    from lamplighter.lab.testcluster import TestCluster

    assert TestCluster(Path(d)).records() == {}
    assert not any(is_alive(r) for r in TestCluster(Path(d)).records().values())
