"""Slurm's compressed host lists ("n[1-3,5]", "rack[1-2]-node[01-02]"), through python-hostlist.

The expansion itself is python-hostlist's (a maintained implementation of
Slurm's syntax, several bracket groups per name included); this module only
gives it Slurm's empty values and an error that names the list. Tested against
recorded `scontrol show hostnames` output (tests/slurm/recorded).
"""

from __future__ import annotations

import hostlist as _hostlist

# What Slurm prints for "no nodes" in NodeList, ExcNodeList, squeue's %N.
EMPTY = frozenset({"", "(null)", "None", "N/A"})


class HostlistError(ValueError):
    """A host list that cannot be expanded; the message quotes it."""


def expand_hostlist(spec: str | None) -> list[str]:
    """Every host name of a Slurm host list, in Slurm's order; [] for an empty one."""
    if spec is None or spec.strip() in EMPTY:
        return []
    try:
        return list(_hostlist.expand_hostlist(spec.strip()))
    except _hostlist.BadHostlist as e:
        raise HostlistError(f"cannot expand Slurm host list {spec!r}: {e}") from e
