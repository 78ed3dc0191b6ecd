"""A stand-in for a pyxis container: a command that sees only an "image" and the job's mounts.

pyxis runs a step in the image's root filesystem with the job's `--container-mounts` bound into it; a
host path outside them (lamplighter's install, a run dir on an unmounted file system) does not exist
there. The lab has no enroot, so this builds the same view with the kernel's own tools, as root:
`unshare --mount` (a private mount namespace, gone with the command), a tmpfs as the new root, the
image's folders bound read-only into it (by default the host's /usr, /etc and the folders of the
interpreter running this, standing in for an image that ships Python), each mount `SRC:DST[:ro]` bound
at DST, /proc, /dev and a fresh /tmp, then `chroot`. Nothing of the host is visible but those.

    argv = standin_argv(["python3", "-c", "..."], parse_mounts(job.slurm.srun_args), workdir=run_dir)

`run_in_standin` runs one command so and removes the empty folder the new root was mounted on.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from lamplighter.configs.container_mounts import Mount, container_mounts

# The host folders that make up the stand-in image: a system and the interpreter running the lab.
DEFAULT_IMAGE = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", sys.base_prefix, sys.prefix)


class StandinError(RuntimeError):
    """The stand-in cannot be built here (not root, no unshare or chroot)."""


def available() -> str | None:
    """None when the stand-in can run here, else why not."""
    if os.geteuid() != 0:
        return "the container stand-in needs root (mount namespaces, chroot)"
    missing = [t for t in ("unshare", "chroot", "mount") if shutil.which(t) is None]
    return f"the container stand-in needs {', '.join(missing)}" if missing else None


def parse_mounts(srun_args: Sequence[str]) -> list[Mount]:
    """The job's mounts as pyxis reads them from slurm.srun_args."""
    return container_mounts(list(srun_args))


def _setup_script(root: str, image: Sequence[str], mounts: Sequence[Mount]) -> list[str]:
    q = shlex.quote
    lines = ["set -eu", f"mount -t tmpfs -o mode=755 lamplighter-standin {q(root)}"]
    seen: set[str] = set()
    for path in image:
        p = os.path.normpath(path)
        if p in seen or not os.path.lexists(p):
            continue
        seen.add(p)
        target = q(root + p)
        if os.path.islink(p):  # /bin -> usr/bin: the same link in the image
            lines += [f"mkdir -p {q(root + os.path.dirname(p))}", f"ln -sfn {q(os.readlink(p))} {target}"]
            continue
        lines += [f"mkdir -p {target}", f"mount --rbind {q(p)} {target}", f"mount -o remount,bind,ro {target}"]
    lines += [  # before the job's mounts: one under /tmp goes over the fresh /tmp, not under it
        f"mkdir -p {q(root + '/proc')} {q(root + '/dev')} {q(root + '/tmp')}",
        f"mount -t proc proc {q(root + '/proc')}",
        f"mount --rbind /dev {q(root + '/dev')}",
        f"mount -t tmpfs -o mode=1777 tmp {q(root + '/tmp')}",
    ]
    for m in mounts:
        target = q(root + m.dst)
        lines += [f"mkdir -p {target}", f"mount --rbind {q(m.src)} {target}"]
        if m.read_only:
            lines.append(f"mount -o remount,bind,ro {target}")
    return lines


def standin_argv(
    argv: Sequence[str],
    mounts: Sequence[Mount],
    *,
    root: str,
    image: Sequence[str] = DEFAULT_IMAGE,
    workdir: str = "/",
) -> list[str]:
    """The command that runs `argv` in the stand-in, its new root mounted on the (empty) folder `root`."""
    setup = _setup_script(root, image, mounts)
    inner = 'cd "$1" && shift && exec "$@"'
    run = f"exec chroot {shlex.quote(root)} /bin/sh -c {shlex.quote(inner)} sh {shlex.quote(workdir)}"
    script = "\n".join([*setup, f'{run} "$@"'])
    return ["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-c", script, "standin", *argv]


def run_in_standin(
    argv: Sequence[str],
    mounts: Sequence[Mount],
    *,
    image: Sequence[str] = DEFAULT_IMAGE,
    workdir: str = "/",
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run `argv` in a container stand-in and wait for it (stdout and stderr captured as text)."""
    why = available()
    if why:
        raise StandinError(why)
    root = tempfile.mkdtemp(prefix="lamplighter-standin-")
    try:
        return subprocess.run(
            standin_argv(argv, mounts, root=root, image=image, workdir=workdir),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
        )
    finally:
        Path(root).rmdir()  # empty again: the tmpfs lived in the command's own mount namespace
