"""Whose account a bare-metal job runs as, how a trainer is started as it, the etcd roles and the password
file: the decisions as pure functions, the shell parts run for real with hostile values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lamplighter.bare import etcd_roles
from lamplighter.bare.accounts import Account, Refused, trainer_account
from lamplighter.bare.etcd_store import Credentials, CredentialsError
from lamplighter.bare.keys import Keys
from lamplighter.bare.user_launch import APPEND_AS_USER, append_as, base_env, setpriv_argv, trainer_argv

ALICE = Account("alice", 1001, 1001, (1001, 27), "/home/alice")
ROOT = Account("root", 0, 0, (0,), "/root")
ACCOUNTS = {"alice": ALICE, "root": ROOT, "svc-alice": Account("svc-alice", 2001, 2001, (), "/srv")}
REPO = Path(__file__).resolve().parents[2]
HOSTILE = ["-rf", "a b", "it's", 'say "hi"', "$(touch pwned)", "`id`", "x;y", "tab\there", "*"]


def find(name: str) -> Account | None:
    return ACCOUNTS.get(name)


def test_a_job_runs_as_the_account_of_the_etcd_user_who_submitted_it() -> None:
    assert trainer_account("alice", {}, False, 0, find) == ALICE
    assert trainer_account("alice", {"alice": "svc-alice"}, False, 0, find) == ACCOUNTS["svc-alice"]


@pytest.mark.parametrize(
    ("user", "users", "root_ok", "daemon_uid", "why"),
    [
        ("bob", {}, False, 0, "etcd user bob has no local account 'bob' on this host"),
        ("alice", {"alice": "nobody-here"}, False, 0, "(trainer_users: nobody-here) has no local account"),
        ("root", {}, False, 0, "maps to root (uid 0): trainers never run as root unless root_trainers: true"),
        ("alice", {"alice": "root"}, False, 0, "maps to root (uid 0)"),
        ("alice", {}, False, 2001, "this host daemon runs as uid 2001, not root: it can start trainers only as itself"),
    ],
)
def test_refused_with_the_reason(user: str, users: dict[str, str], root_ok: bool, daemon_uid: int, why: str) -> None:
    verdict = trainer_account(user, users, root_ok, daemon_uid, find)
    assert isinstance(verdict, Refused) and why in verdict.reason


def test_root_only_when_the_host_config_says_so_and_an_unprivileged_daemon_runs_its_own() -> None:
    assert trainer_account("root", {}, True, 0, find) == ROOT
    assert trainer_account("alice", {}, False, 1001, find) == ALICE


def test_setpriv_drops_every_capability_and_sets_the_death_signal_after_the_switch() -> None:
    argv = setpriv_argv(ALICE, 0, "/usr/bin/setpriv")
    assert argv == [
        "/usr/bin/setpriv",
        "--reuid=1001",
        "--regid=1001",
        "--groups=1001,27",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--pdeathsig=KILL",
        "--",
    ]
    assert "--clear-groups" in setpriv_argv(ACCOUNTS["svc-alice"], 0, "setpriv")
    assert setpriv_argv(ALICE, 1001, "setpriv")[1:] == [
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--no-new-privs",
        "--pdeathsig=KILL",
        "--",
    ]


def test_a_trainer_gets_its_accounts_names_and_nothing_of_the_daemons_environment() -> None:
    env = base_env(ALICE, {"PATH": "/opt/bin", "ETCD_PASSWORD": "x", "LD_PRELOAD": "/evil.so", "LANG": "C.UTF-8"})
    assert env == {"PATH": "/opt/bin", "LANG": "C.UTF-8", "HOME": "/home/alice", "USER": "alice", "LOGNAME": "alice"}


@pytest.mark.parametrize("name", HOSTILE)
def test_the_shell_that_opens_the_trainers_files_takes_every_value_as_data(tmp_path: Path, name: str) -> None:
    """As this test's own user (no switch: daemon_uid is ours): run dir, log, config and command arguments
    with quotes, spaces, a leading dash and substitutions arrive intact, and nothing runs from them."""
    me = Account("me", os.getuid(), os.getgid(), (), str(tmp_path))
    run = tmp_path / name / "run"
    job_json = json.dumps({"name": name, "note": "line1\nline2 $(touch pwned) 'q' \"dq\""})
    out = tmp_path / "args.json"
    cmd = ["/bin/sh", "-c", 'printf "%s\\n" "$PWD" "$@" >"$0"', str(out), name, "--flag", ""]
    argv = trainer_argv(me, os.getuid(), run, run / "logs" / f"{name}.log", run / "job.json", "h1.0", cmd)
    env = {"PATH": "/usr/bin:/bin", "LAMPLIGHTER_JOB_JSON": job_json}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().split("\n")[:-1] == [str(run), name, "--flag", ""]
    assert (run / "job.json").read_text() == job_json + "\n"
    assert (run / "logs" / f"{name}.log").is_file()
    assert not list(tmp_path.rglob("pwned")) and not (Path.cwd() / "pwned").exists()


@pytest.mark.parametrize("line", ['{"reason": "it\'s $(touch pwned) `id` \\"q\\""}', "-n", "%s%n"])
def test_an_action_line_is_appended_as_data(tmp_path: Path, line: str) -> None:
    me = Account("me", os.getuid(), os.getgid(), tuple(os.getgroups()), str(tmp_path))
    run = tmp_path / "-odd dir"
    append_as(me, os.getuid(), run, "actions.jsonl", line)
    append_as(me, os.getuid(), run, "actions.jsonl", line)
    assert (run / "actions.jsonl").read_text() == f"{line}\n{line}\n"
    assert not list(tmp_path.rglob("pwned"))
    assert "$3" in APPEND_AS_USER  # the line is an argument of the shell, never part of its script


def test_an_action_line_that_cannot_be_written_says_where_and_why(tmp_path: Path) -> None:
    me = Account("me", os.getuid(), os.getgid(), (), str(tmp_path))
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match=r"appending to .*file/sub/actions.jsonl as me: .*"):
        append_as(me, os.getuid(), tmp_path / "file" / "sub", "actions.jsonl", "{}")


def test_only_a_submitter_may_write_its_specs_and_no_host_may() -> None:
    keys = Keys("c")
    writes = {
        "h1": [g for g in etcd_roles.host_role(keys, "h1").grants if g.kind == "readwrite"],
        "alice": [g for g in etcd_roles.submitter_role(keys, "alice").grants if g.kind == "readwrite"],
        "ops": [g for g in etcd_roles.operator_role(keys).grants if g.kind == "readwrite"],
    }

    def may_write(who: str, key: str) -> bool:
        return any(key == g.key or (g.prefix and key.startswith(g.key)) for g in writes[who])

    spec = keys.spec("alice", "job")
    assert may_write("alice", spec) and not may_write("h1", spec) and not may_write("ops", spec)
    assert not may_write("alice", keys.spec("bob", "job")) and not may_write("alice", keys.spec("alice2", "j"))
    assert may_write("h1", keys.host("h1")) and not may_write("h1", keys.host("h2"))
    assert may_write("h1", keys.out("h1")) and not may_write("h1", keys.out("h2")) and may_write("ops", keys.out("h2"))
    assert may_write("h1", keys.group("job", 0)) and not may_write("alice", keys.group("job", 0))
    assert may_write("h1", keys.placer) and not may_write("alice", keys.placer)
    lines = etcd_roles.etcdctl_lines(etcd_roles.submitter_role(keys, "alice"), "alice")
    assert (
        lines[0] == "etcdctl user add alice" and lines[-1] == "etcdctl user grant-role alice lamplighter-c-user-alice"
    )
    assert (
        "etcdctl role grant-permission --prefix=true lamplighter-c-user-alice readwrite /lamplighter/c/specs/alice/"
        in lines
    )
    with pytest.raises(ValueError, match="etcd user"):
        etcd_roles.submitter_role(keys, "../h1")


def test_a_submitter_reads_the_hosts_the_placements_and_its_own_specs_not_another_users() -> None:
    """deploy/SECURITY.md: a submitter can read the hosts, the placements and its own specs, not another
    user's (another user's spec holds its trainer.env)."""
    keys = Keys("c")
    grants = etcd_roles.submitter_role(keys, "alice").grants

    def may_read(key: str) -> bool:
        return any(key == g.key or (g.prefix and key.startswith(g.key)) for g in grants)

    assert may_read(keys.host("h1")) and may_read(keys.group("job", 0)) and may_read(keys.spec("alice", "job"))
    assert not may_read(keys.spec("bob", "job")) and not may_read(keys.spec("alice2", "job"))
    assert {g.kind for g in grants} <= {"read", "readwrite"}


def test_a_spec_key_names_its_user_and_job_and_nothing_else_is_one() -> None:
    keys = Keys("c")
    assert keys.parse_spec(keys.spec("alice", "j-1")) == ("alice", "j-1")
    for key in ["/lamplighter/c/specs/alice", "/lamplighter/c/specs/alice/j/x", "/lamplighter/c/specs/-x/j",
                "/lamplighter/d/specs/alice/j", "/lamplighter/c/jobs/j/groups/0"]:  # fmt: skip
        assert keys.parse_spec(key) is None, key


def test_a_password_file_must_be_its_owners_alone_and_a_regular_file(tmp_path: Path) -> None:
    good = tmp_path / "pw"
    good.write_text("s3cret\n")
    good.chmod(0o600)
    creds = Credentials.from_file("alice", str(good))
    assert creds.password == "s3cret" and "s3cret" not in repr(creds)
    good.chmod(0o640)
    with pytest.raises(CredentialsError, match=r"others may read it \(mode 0640\): chmod 600"):
        Credentials.from_file("alice", str(good))
    good.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(good)
    with pytest.raises(CredentialsError, match="symbolic link"):
        Credentials.from_file("alice", str(link))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(CredentialsError, match="not a regular file"):
        Credentials.from_file("alice", str(fifo))  # opened without blocking, then refused
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(CredentialsError, match="expected one line, the password"):
        Credentials.from_file("alice", str(empty))


def lamplighter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lamplighter", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_hosts_roles_prints_the_etcdctl_commands_for_every_host_submitter_and_operator() -> None:
    config = str(REPO / "configs" / "bare-host.yaml")
    out = lamplighter("hosts", "--config", config, "roles", "--submitter", "alice", "--operator", "ops")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for who in ["gpu-h1", "gpu-h2", "gpu-h3", "gpu-h4", "gpu-s1", "alice", "ops"]:
        assert f"etcdctl user add {who}" in lines, who
    assert "etcdctl user grant-role ops lamplighter-mi325x-a-operator" in lines
    bad = lamplighter("hosts", "--config", config, "roles", "--submitter", "$(id)")
    assert bad.returncode == 2 and "etcd user '$(id)'" in bad.stderr and "etcdctl" not in bad.stdout
