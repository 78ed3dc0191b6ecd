"""One line fit for every scale measure (bench/line_fit.py)."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


@pytest.fixture
def lf(bench: ModuleType) -> ModuleType:
    return importlib.import_module("bench.line_fit")


def test_least_squares_through_two_sizes_and_none_through_one(lf: ModuleType) -> None:
    assert lf.least_squares([4.0, 16.0], [7.6, 12.4]) == (pytest.approx(6.0), pytest.approx(0.4))
    with pytest.raises(ValueError):
        lf.least_squares([4.0, 4.0], [1.0, 2.0])
    assert lf.fit_line([4.0, 4.0], [1.0, 2.0]) is None


def test_a_falling_measure_is_projected_at_its_largest_sizes_value(lf: ModuleType) -> None:
    line = lf.fit_line([4.0, 16.0, 64.0], [0.437, 0.372, 0.309])
    assert line["falling"] and line["projected"] == {"1000": 0.309, "10000": 0.309}


def test_a_line_that_changes_by_less_than_one_rpc_in_the_window_is_flat(lf: ModuleType) -> None:
    # Measured at cec49f5: 24 RPCs in a 31-s window at 4 nodes, 24 in 30 s at 16 and 64. The slope of that
    # rounding, multiplied out to 10,000 nodes, would read 3.9 RPCs a second.
    xs, ys = [4.0, 16.0, 64.0], [0.774, 0.8, 0.8]
    assert lf.fit_line(xs, ys)["projected"]["10000"] > 3
    flat = lf.fit_line(xs, ys, resolution=1 / 30)
    assert flat["per_unit"] == 0 and flat["projected"]["10000"] == pytest.approx(0.7913, abs=1e-3)
    # A growth larger than one RPC over the sizes measured is still a line.
    assert lf.fit_line(xs, [0.8, 1.2, 2.8], resolution=1 / 30)["per_unit"] > 0
