"""A second, unprivileged user on this machine, and running things as that user.

CI runs as root, so the tests create the user (`useradd`) when it is missing and keep it for later runs (other
test processes may be using it at the same time). A developer's machine without root skips these tests; CI
fails them (realparts.missing).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from realparts import missing

TENANT = "lltenant"  # an ordinary cluster user: no group, no sudo, a uid from the normal range


@dataclass(frozen=True)
class Tenant:
    name: str
    uid: int
    gid: int
    home: Path  # a folder of the tenant's own, that every user may reach (pytest's tmp folder is root's only)

    def run(
        self, argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """argv as the tenant (runuser: a fresh login-less session of that user), in its home folder."""
        full = ["runuser", "-u", self.name, "--", "env", *(f"{k}={v}" for k, v in (env or {}).items()), *argv]
        return subprocess.run(full, capture_output=True, text=True, timeout=timeout, check=check, cwd=self.home)

    def write(self, name: str, text: str, mode: int = 0o644) -> Path:
        """A file in the tenant's home, the tenant's own."""
        path = self.home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
        os.chown(path, self.uid, self.gid)
        return path

    def folder(self, name: str, mode: int = 0o755) -> Path:
        path = self.home / name
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)
        os.chown(path, self.uid, self.gid)
        return path


def ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        missing("a second user", f"needs root and useradd to create {name!r}")
    proc = subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/bash", name], capture_output=True, text=True)
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise AssertionError(f"useradd {name} failed: {proc.stderr}") from None


@pytest.fixture(scope="session")
def tenant() -> Iterator[Tenant]:
    if shutil.which("runuser") is None:
        missing("runuser", "apt-get install util-linux")
    pw = ensure_user(TENANT)
    assert pw.pw_uid >= 1000 and pw.pw_uid != 0, pw
    home = Path(tempfile.mkdtemp(prefix="ll-tenant-"))
    home.chmod(0o755)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    try:
        yield Tenant(pw.pw_name, pw.pw_uid, pw.pw_gid, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
