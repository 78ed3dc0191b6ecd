"""The lab's commands are its own entry (python -m lamplighter.lab), not the product's `lamplighter`."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamplighter.commands.cli import COMMAND_MODULES, build_parser
from lamplighter.lab import __main__ as lab_entry
from lamplighter.lab import chaos_cli


def test_the_product_cli_has_no_lab_command() -> None:
    assert not any(".lab." in m for m in COMMAND_MODULES)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["cluster", "up"])
    with pytest.raises(SystemExit):  # node-crash's test-cluster folder is the lab's option
        build_parser().parse_args(["chaos", "lab", "--once", "node-crash", "--cluster-root", "c"])


def test_the_lab_entry_runs_the_cluster_and_chaos_with_node_crash() -> None:
    parser = lab_entry.build_parser()
    up = parser.parse_args(["cluster", "up", "--dir", "build/c"])
    assert up.action == "up" and up.dir == "build/c"
    crash = parser.parse_args(["chaos", "lab", "--once", "node-crash", "--cluster-root", "c"])
    assert crash.func is chaos_cli.run and crash.cluster_root == Path("c") and crash.once == "node-crash"
