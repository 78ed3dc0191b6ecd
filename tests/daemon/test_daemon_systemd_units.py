"""The unit files in deploy/systemd/ pass `systemd-analyze verify`.

verify checks that ExecStart's binary exists and is executable. The units name
/usr/local/bin/lamplighter, where a node install puts it; here the unit is
rendered into tmp_path with ExecStart pointing at the console script installed
next to this Python, so the check runs against a real binary instead of being
switched off.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from realparts import missing

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
INSTALLED = "/usr/local/bin/lamplighter"
NAMES = ["lamplighter-node.service", "lamplighter-head.service"]


def _systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        missing("systemd-analyze", "apt-get install systemd")
    return tool


def _console_script() -> Path:
    script = Path(sys.executable).parent / "lamplighter"
    assert script.exists(), f"{script} missing: pip install -e . first"
    return script


def _directives(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def _verify(tool: str, unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)


def _assert_installed_unit_verifies(tool: str, name: str, tmp_path: Path) -> None:
    """The shipped unit, pointed at this venv's console script, verifies with no line about it."""
    rendered = tmp_path / name
    rendered.write_text((UNITS / name).read_text().replace(INSTALLED, str(_console_script())))
    result = _verify(tool, rendered)
    assert result.returncode == 0, result.stderr
    # Unknown keys and bad values are only warnings (exit 0): any line about our unit fails the test.
    assert [line for line in result.stderr.splitlines() if name in line] == []


@pytest.mark.parametrize("name", NAMES)
def test_unit_verifies(name: str, tmp_path: Path) -> None:
    tool = _systemd_analyze()
    text = (UNITS / name).read_text()
    assert f"ExecStart={INSTALLED} supervise --config /etc/lamplighter/" in text
    _assert_installed_unit_verifies(tool, name, tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_unit_has_what_the_daemon_relies_on(name: str) -> None:
    d = _directives((UNITS / name).read_text())
    assert d["Type"] == "notify"
    assert d["NotifyAccess"] == "main"
    assert int(d["WatchdogSec"]) > 0
    assert d["Restart"] == "always"
    assert d["KillMode"] == "process"  # stopping the daemon leaves the trainers running
    assert d["StartLimitIntervalSec"] == "0"
    caps = set(d["CapabilityBoundingSet"].split())
    assert {"CAP_KILL", "CAP_SYS_PTRACE"} <= caps
    # Writes into a job's run directory happen as the job's user: the daemon may drop to it, nothing more.
    assert {"CAP_SETUID", "CAP_SETGID"} <= caps and "CAP_SYS_ADMIN" not in caps and "CAP_DAC_OVERRIDE" not in caps
    assert d["NoNewPrivileges"] == "yes"
    assert d["MemoryMax"] and d["TasksMax"]  # nothing a job makes it read can take the node's memory
    assert "ProtectProc" not in d  # would hide the trainers' /proc entries
    assert d["StateDirectory"] == "lamplighter" and d["RuntimeDirectory"] == "lamplighter"


# What forking the readers as a job's user calls (supervisor/user_reads/): fork, become the user, drop every
# capability, no new privileges, hand back a socket and a pidfd, signal and reap the helper.
USER_READS_SYSCALLS = [
    "fork", "clone", "clone3", "setgroups", "setresgid", "setresuid", "capset", "prctl", "socketpair",
    "sendmsg", "recvmsg", "pidfd_open", "pidfd_send_signal", "wait4", "waitid",
]  # fmt: skip


def _syscalls(tool: str, group: str, seen: set[str] | None = None) -> set[str]:
    """Every system call a SystemCallFilter group allows, its @groups expanded (systemd-analyze's own list)."""
    seen = set() if seen is None else seen
    seen.add(group)
    out = subprocess.run([tool, "syscall-filter", group], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    calls = set()
    for word in (line.split("#")[0].strip() for line in out.stdout.splitlines()[1:]):
        if word.startswith("@") and word not in seen:
            calls |= _syscalls(tool, word, seen)
        elif word and not word.startswith("@"):
            calls.add(word)
    return calls


def test_the_units_system_call_filter_lets_the_daemon_fork_its_readers_as_users() -> None:
    tool = _systemd_analyze()
    d = _directives((UNITS / NAMES[0]).read_text())
    allowed: set[str] = set()
    for group in d["SystemCallFilter"].split():
        allowed |= _syscalls(tool, group) if group.startswith("@") else {group}
    assert [c for c in USER_READS_SYSCALLS if c not in allowed] == []
    assert {"CAP_SETUID", "CAP_SETGID"} <= set(d["CapabilityBoundingSet"].split())  # to become the job's user


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    tool = _systemd_analyze()
    text = (UNITS / NAMES[0]).read_text()
    missing = tmp_path / "missing.service"
    missing.write_text(text.replace(INSTALLED, str(tmp_path / "no-such-binary")))
    assert _verify(tool, missing).returncode != 0
    typo = tmp_path / "typo.service"
    typo.write_text(text.replace("KillMode=process", "KilMode=process").replace(INSTALLED, str(_console_script())))
    assert "typo.service" in _verify(tool, typo).stderr


def test_no_unit_runs_user_code_or_serves_users() -> None:
    """Warm restarts live in each job's own allocation (injob/): no service of lamplighter hands anyone a process."""
    assert sorted(p.name for p in UNITS.glob("*.service")) == sorted(NAMES)
    for name in NAMES:
        text = (UNITS / name).read_text()
        assert "standby" not in text and "0666" not in text
