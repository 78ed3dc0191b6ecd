"""lamplighter's torchtitan launch, copied into the run dir, where the trainers' container can see it.

A torchtitan job's trainers run `-m lamplighter_torchtitan torchtitan.train ...` with the training
environment's interpreter, often inside a container (pyxis `--container-image`) that sees the job's mounts
and nothing of the host: not lamplighter's install. The launch is standard library only, so `submit` copies
it into `<run_dir>/boot/lamplighter_torchtitan/` (contract.RunPaths.boot) and the trainers' PYTHONPATH names
`<run_dir>/boot`; the run dir is already where the trainers read job.json and write their step logs, so a
container job mounts it anyway (`lamplighter validate` checks that it does).

The copy is made as the submitting user, in a new folder beside the old one, then renamed into place, so a
reader sees the old launch or the new one, never half of one. Submitting again with the same lamplighter
changes nothing; a group's renewal (a requeue) renders nothing and finds the copy in place.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from pathlib import Path

from lamplighter.rundir import contract
from lamplighter.trainer.adapter import TORCHTITAN_BOOT_DIR

BOOT_PACKAGE = "lamplighter_torchtitan"
_NEW, _OLD = ".boot-new-", ".boot-old-"
LEFTOVER_AGE_S = 600  # a folder of a submit that died half-way, older than any submit still copying


def boot_sources(src: Path | None = None) -> dict[str, bytes]:
    """The launch's files (its modules; no caches), by name."""
    folder = src or Path(TORCHTITAN_BOOT_DIR) / BOOT_PACKAGE
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.py"))}


def _holds(folder: Path, files: dict[str, bytes]) -> bool:
    try:
        have = {p.name: p for p in folder.glob("*.py") if p.is_file() and not p.is_symlink()}
        return set(have) == set(files) and all(have[n].read_bytes() == data for n, data in files.items())
    except OSError:
        return False


def _clean_leftovers(run_dir: Path, now: float) -> None:
    for p in run_dir.glob(".boot-*"):
        if not p.name.startswith((_NEW, _OLD)) or p.is_symlink() or not p.is_dir():
            continue
        try:
            if now - p.lstat().st_mtime > LEFTOVER_AGE_S:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


def install_boot(run_dir: Path, src: Path | None = None) -> Path:
    """Put the launch in `<run_dir>/boot/lamplighter_torchtitan/` (atomically; nothing changes when it is
    there already) and return `<run_dir>/boot`, the folder for the trainers' PYTHONPATH."""
    dest = contract.RunPaths(run_dir).boot()
    files = boot_sources(src)
    if not files:
        raise FileNotFoundError(f"lamplighter's torchtitan launch is missing from {src or TORCHTITAN_BOOT_DIR}")
    if not dest.is_symlink() and _holds(dest / BOOT_PACKAGE, files):
        return dest
    run_dir.mkdir(parents=True, exist_ok=True)
    _clean_leftovers(run_dir, time.time())
    new = run_dir / f"{_NEW}{secrets.token_hex(6)}"
    new.mkdir()  # as the run dir's other folders: the user's, with the user's umask
    old: Path | None = None
    try:
        (new / BOOT_PACKAGE).mkdir()
        for name, data in files.items():
            (new / BOOT_PACKAGE / name).write_bytes(data)
        if dest.exists() or dest.is_symlink():
            old = run_dir / f"{_OLD}{secrets.token_hex(6)}"
            os.rename(dest, old)
        try:
            os.rename(new, dest)
        except OSError:
            if old is not None:
                os.rename(old, dest)  # the old launch back where it was
                old = None
            raise
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
    return dest
