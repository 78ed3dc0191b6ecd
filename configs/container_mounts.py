"""What a pyxis container shows of the host, from the srun options a job gives its trainer step.

pyxis (`srun --container-image=...`) runs the step in the image's root filesystem with only the mounts
it is told of: `--container-mounts=SRC:DST[:FLAGS][,SRC:DST...]` (a lone `SRC` is mounted at the same
path; FLAGS joined by '+', e.g. `ro+rprivate`) and, with `--container-mount-home`, the user's home. A
host path the job's scripts name (the run dir: job.json, lamplighter's launch, the step logs) reaches
the trainer only when a mount shows it at that same path. Mounts the site's enroot configuration adds
are not known here: a job names what it needs itself.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

CONTAINER_OPTIONS = ("--container-image", "--container-name")


@dataclass(frozen=True)
class Mount:
    src: str
    dst: str
    read_only: bool = False

    def spec(self) -> str:
        return f"{self.src}:{self.dst}" + (":ro" if self.read_only else "")


def _option(arg: str) -> tuple[str, str | None]:
    name, eq, value = arg.partition("=")
    return name, value if eq else None


def in_container(srun_args: list[str]) -> bool:
    """Does the trainer step run in a pyxis container?"""
    return any(_option(a)[0] in CONTAINER_OPTIONS for a in srun_args)


def container_mounts(srun_args: list[str], home: str | None = None) -> list[Mount]:
    """The bind mounts of the step's container, in order (a later one over an earlier one)."""
    out: list[Mount] = []
    for arg in srun_args:
        name, value = _option(arg)
        if name == "--container-mount-home":
            where = home or os.path.expanduser("~")
            out.append(Mount(posixpath.normpath(where), posixpath.normpath(where)))
        if name != "--container-mounts" or not value:
            continue
        for entry in value.split(","):
            if not entry:
                continue
            parts = entry.split(":")
            src = parts[0]
            dst = parts[1] if len(parts) > 1 and parts[1] else src
            flags = parts[2].split("+") if len(parts) > 2 else []
            if src.startswith("/") and dst.startswith("/"):
                out.append(Mount(posixpath.normpath(src), posixpath.normpath(dst), "ro" in flags))
    return out


def _under(path: str, top: str) -> bool:
    return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")


def shown_by(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount that decides what the container shows at `path` (the deepest destination above it; of two
    at one place, the later), or None: the image's own files are there."""
    path = posixpath.normpath(path)
    best: Mount | None = None
    for m in mounts:
        if _under(path, m.dst) and (best is None or len(m.dst) >= len(best.dst)):
            best = m
    return best


def same_path(path: str, mount: Mount) -> bool:
    """Does `mount` show the host's `path` at `path` itself?"""
    path = posixpath.normpath(path)
    rel = posixpath.relpath(path, mount.dst)
    return posixpath.normpath(posixpath.join(mount.src, rel)) == path
