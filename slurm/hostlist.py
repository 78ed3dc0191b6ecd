"""Slurm's compressed host lists, without calling `scontrol show hostnames`."""

from __future__ import annotations

import re


def expand_hostlist(spec: str | None) -> list[str]:
    """Slurm's compressed host lists: "n1", "n[1-3,5]", "a1,b[2-3]"."""
    if not spec:
        return []
    out: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", spec):
        prefix, ranges = m.group(1), m.group(2)
        if not ranges:
            out.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{prefix}{i:0{width}d}")
    return out
