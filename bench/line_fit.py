"""A measure as a line in a count (nodes, hosts, groups), projected to sizes no lab here reaches: one fit for
every benchmark."""

from __future__ import annotations

from typing import Any

SIZES = (1_000, 10_000)  # what every scale fit projects to


def least_squares(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """y = a + b x over two or more distinct xs: (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("a line needs two distinct sizes")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - b * mx, b


def fit_line(
    xs: list[float], ys: list[float], resolution: float | None = None, sizes: tuple[int, ...] = SIZES
) -> dict[str, Any] | None:
    """The line, projected to `sizes`; None with fewer than two distinct xs. `resolution`: the smallest change
    the measure can show (one RPC in the counting window): a line that changes by less over the sizes
    measured is flat, its value their mean, not a slope that a projection would multiply."""
    if len(set(xs)) < 2:
        return None
    a, b = least_squares(xs, ys)
    if resolution is not None and abs(b) * (max(xs) - min(xs)) < resolution:
        a = sum(ys) / len(ys)
        flat = {str(n): a for n in sizes}
        return {"fixed": a, "per_unit": 0.0, "over": xs, "falling": False, "flat_within": resolution, "projected": flat}
    # A measure that falls with the count is projected at its largest size's value, not down the line: a
    # per-host rate that falls as one placer's share spreads cannot fall below its own renewals.
    last = ys[max(range(len(xs)), key=lambda i: xs[i])]
    projected = {str(n): (a + b * n if b > 0 else last) for n in sizes}
    return {"fixed": a, "per_unit": b, "over": xs, "falling": b <= 0, "projected": projected}
