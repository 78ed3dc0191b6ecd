"""The run report's timeline gives every fault kind a colour of its own (the review: node-crash, gpu,
lighthouse-kill and supervisor-kill were all grey)."""

from __future__ import annotations

import typing

from lamplighter.configs.schema import ChaosKind
from lamplighter.lab.demo_bare import KINDS as BARE_KINDS
from lamplighter.report.timeline import COLOURS
from lamplighter.slurm.chaos.inject import KINDS as SLURM_KINDS


def test_every_fault_kind_has_a_colour_of_its_own() -> None:
    kinds = {*typing.get_args(ChaosKind), *SLURM_KINDS, *BARE_KINDS, "unplanned"}
    assert kinds <= set(COLOURS), sorted(kinds - set(COLOURS))
    assert len(set(COLOURS.values())) == len(COLOURS), "two kinds share a colour"


def test_the_colours_are_matplotlibs() -> None:
    import pytest

    colors = pytest.importorskip("matplotlib.colors")
    assert all(colors.is_color_like(c) for c in COLOURS.values())
