"""Bare metal without root trainers, on real parts: etcd 3.4 with TLS and its auth on (the roles of
bare/etcd_roles.py), a host daemon started as `lamplighter supervise` (root, as under systemd), and a real
second account made with useradd, whose etcd user submits the job.

Attacks refused, with the evidence from etcd and the kernel: a spec written by anyone but its user (another
submitter, a host, a client with no password, a certificate of another CA) never reaches etcd; a job whose
user maps to root is refused by the host; the authorised job's trainer runs as its user with no capability
and no_new_privs, and everything of it (log, job.json, action lines) is written as that user, so a symlink
in its run directory reaches nothing root owns.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml
from realparts import wait_for

from lamplighter.bare import etcd_roles
from lamplighter.bare.accounts import Account
from lamplighter.bare.etcd_store import Credentials, EtcdError, Store, Tls, absent, delete, put
from lamplighter.bare.host_daemon import HostConfinementError, HostDaemon
from lamplighter.bare.keys import Keys
from lamplighter.bare.placer import HostEntry
from lamplighter.lab.etcd_cluster import EtcdCluster
from lamplighter.lab.etcd_tls import make_pki
from lamplighter.lab.throwaway_user import throwaway_user
from lamplighter.system.ports import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.xdist_group("bare-metal-users"),  # one worker: the module's etcd, account and daemon made once
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None, reason="needs root and useradd"),
]

CLUSTER = "sec"
HOST = "h1"
# The trainer: records who it is, as the kernel says, then waits to be killed.
PROBE = (
    'grep -E "^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):" /proc/self/status '
    '>"$LAMPLIGHTER_RUN_DIR/probe-$LAMPLIGHTER_REPLICA_ID.txt"; exec sleep 600'
)
# A trainer that beats three steps (trainer/heartbeat.py's file, written as its user), then hangs. (Braces
# doubled: trainer.command's placeholders.)
BEATS_THEN_HANGS = """
beat="$LAMPLIGHTER_RUN_DIR/heartbeat/$LAMPLIGHTER_REPLICA_ID.0.json"
mkdir -p "${{beat%/*}}"
for step in 1 2 3; do
    printf '{{"step": %d, "time": %s, "pid": %d, "attempt": %d}}' "$step" "$(date +%s.%N)" $$ "$LAMPLIGHTER_ATTEMPT" >"$beat.tmp"
    mv "$beat.tmp" "$beat"
    sleep 0.2
done
exec sleep 600
"""


@dataclass
class Bare:
    etcd: EtcdCluster
    keys: Keys
    folder: Path  # the lab's, root's
    shared: Path  # where the job's run directories go: the second account may write here
    alice: Account  # the real second account; its etcd user has the same name
    users: dict[str, tuple[Tls, Credentials]]
    daemon: subprocess.Popen[bytes]
    daemon_log: Path

    def store(self, user: str) -> Store:
        tls, creds = self.users[user]
        return Store(self.etcd.endpoints, timeout_s=2.0, tls=tls, auth=creds)

    def job(self, name: str, run_dir: Path, user: str = "", **extra: object) -> str:
        """The job config `lamplighter submit` would write for `user` (its etcd section: how it reached etcd)."""
        tls, creds = self.users[user or self.alice.name]
        etcd = {
            "endpoints": self.etcd.endpoints,
            "ca_file": tls.ca,
            "cert_file": tls.cert,
            "key_file": tls.key,
            "user": creds.user,
            "password_file": f"/home/{creds.user}/etcd-password",  # the submitter's, never read by a host
        }
        doc = {
            "name": name,
            "run_dir": str(run_dir),
            "placement": "bare-metal",
            "bare_metal": {"cluster": CLUSTER, "etcd": etcd},
            "lighthouse": {"host": "127.0.0.1", "port": free_port()},  # never reached: the probe is no torchft
            "groups": {"count": 1},
            "trainer": {"command": ["/bin/sh", "-c", PROBE]},
            "health": {"hang_timeout_s": 600, "startup_timeout_s": 600},
        }
        return json.dumps({**doc, **extra})


def password_file(folder: Path, creds: Credentials) -> Path:
    path = folder / f"{creds.user}.password"
    path.write_text(creds.password + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bare]:
    folder = tmp_path_factory.mktemp("bare-sec")
    with throwaway_user("llbare") as alice, EtcdCluster(folder / "etcd", size=1, tls=True, auth=True) as etcd:
        keys = Keys(CLUSTER)
        users: dict[str, tuple[Tls, Credentials]] = {}
        for user, role in [
            (HOST, etcd_roles.host_role(keys, HOST)),
            (alice.name, etcd_roles.submitter_role(keys, alice.name)),
            ("mallory", etcd_roles.submitter_role(keys, "mallory")),
        ]:
            users[user] = (etcd.client_tls(user), etcd.add_user(user, role))
        tls, creds = users[HOST]
        node = {
            "role": "bare-metal",
            "node_name": HOST,
            "state_dir": str(folder / "state"),
            "health": {"poll_interval_s": 0.2},
            "bare_metal": {
                "cluster": CLUSTER,
                "etcd": {
                    "endpoints": etcd.endpoints,
                    "ca_file": tls.ca,
                    "cert_file": tls.cert,
                    "key_file": tls.key,
                    "user": HOST,
                    "password_file": str(password_file(folder, creds)),
                    "timeout_s": 1,
                },
                "hosts": [HOST],
                "lease_ttl_s": 3,
                "fence_margin_s": 1,
            },
        }
        (folder / "node.yaml").write_text(yaml.safe_dump(node))
        shared = Path(tempfile.mkdtemp(prefix="lamplighter-bare-sec-"))  # tmp_path is root's alone (0700)
        os.chown(shared, alice.uid, alice.gid)
        log = folder / "daemon.log"
        with log.open("wb") as out:
            daemon = subprocess.Popen(
                [sys.executable, "-m", "lamplighter", "supervise", "--config", str(folder / "node.yaml")],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        b = Bare(etcd, keys, folder, shared, alice, users, daemon, log)
        admin = etcd.admin_store()
        try:
            wait_for(lambda: admin.get(keys.host(HOST)) is not None, 60, "the host daemon's lease in etcd")
            yield b
        finally:
            admin.close()
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
            shutil.rmtree(shared, ignore_errors=True)


def processes_of(uid: int) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]


def test_an_authorised_spec_runs_as_its_user_with_no_capability(bare: Bare) -> None:
    run = bare.shared / "alice-run"
    alice = bare.store(bare.alice.name)
    spec = bare.keys.spec(bare.alice.name, "alice-job")
    assert alice.txn("submit", [absent(spec)], [put(spec, bare.job("alice-job", run))])
    probe = run / "probe-0.txt"
    wait_for(lambda: probe.is_file() and "NoNewPrivs" in probe.read_text(), 60, "alice's trainer to report")
    status = dict(line.split(":", 1) for line in probe.read_text().splitlines())
    a = bare.alice
    assert status["Uid"].split() == [str(a.uid)] * 4 and status["Gid"].split() == [str(a.gid)] * 4
    for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[caps], 16) == 0, (caps, status[caps])
    assert status["NoNewPrivs"].strip() == "1"
    # Everything of the job was created by its user, none of it by root.
    for path in (run, run / "logs" / f"g0-{HOST}.log", run / "job.json", probe):
        assert path.stat().st_uid == a.uid, path
    wait_for(lambda: (run / "actions.jsonl").is_file(), 30, "the host's action line in the run directory")
    assert (run / "actions.jsonl").stat().st_uid == a.uid
    [trainer] = [p for p in processes_of(a.uid) if p.cwd() == str(run)]  # in its run directory, as the user
    assert trainer.uids() == (a.uid, a.uid, a.uid) and trainer.name() == "sleep"
    # Its user cancels it (deletes the spec): the host kills the trainer.
    alice.txn("cancel", [], [delete(spec)])
    alice.close()
    wait_for(lambda: not trainer.is_running() or trainer.status() == psutil.STATUS_ZOMBIE, 30, "the kill")


def test_a_spec_from_anyone_but_its_user_never_reaches_etcd(bare: Bare, tmp_path: Path) -> None:
    target = bare.keys.spec(bare.alice.name, "forged")  # a job that would run as alice
    forged = bare.job("forged", bare.shared / "forged")
    mallory, host = bare.store("mallory"), bare.store(HOST)
    tls, _ = bare.users["mallory"]
    no_password = Store(bare.etcd.endpoints, timeout_s=2.0, tls=tls)
    stranger = make_pki(tmp_path / "other-ca", ca_name="another-ca").client("mallory", common_name=False)
    other_ca = Store(
        bare.etcd.endpoints, timeout_s=2.0, tls=Tls(tls.ca, stranger.cert, stranger.key), auth=bare.users["mallory"][1]
    )
    refused = {}
    for who, store in [("another submitter", mallory), ("a host", host), ("no password", no_password)]:
        with pytest.raises(EtcdError) as e:
            store.put(target, forged)
        refused[who] = str(e.value)
    assert "permission denied" in refused["another submitter"] and "permission denied" in refused["a host"]
    assert "user name is empty" in refused["no password"]
    with pytest.raises(EtcdError):  # the TLS handshake fails: etcd never reads the request
        other_ca.put(target, forged)
    # mallory may write only under her own name, which the host runs as mallory's account (none here).
    assert mallory.put(bare.keys.spec("mallory", "mine"), bare.job("mine", bare.shared / "mallory", "mallory"))
    root = bare.etcd.admin_store()
    try:
        assert root.get(target) is None
        refusal = wait_for(lambda: root.get(bare.keys.refused("mine", HOST)), 30, "the host to refuse mallory's job")
        assert "no local account 'mallory'" in json.loads(refusal.value)["reason"]
    finally:
        root.close()
    assert not (bare.shared / "mallory").exists() and not (bare.shared / "forged").exists()
    for s in (mallory, host, no_password, other_ca):
        s.close()


def test_a_submitter_reads_the_hosts_and_its_own_specs_never_another_users(bare: Bare) -> None:
    """deploy/SECURITY.md: a submitter reads the hosts, the placements and its own specs, not another user's
    (a spec holds its trainer.env). etcd refuses the read whether or not the key exists."""
    mallory = bare.store("mallory")
    try:
        assert mallory.get(bare.keys.host(HOST)) is not None  # the host's lease: the hosts are public
        assert mallory.get(bare.keys.spec("mallory", "none-yet")) is None  # her own: allowed, absent
        for key in (bare.keys.spec(bare.alice.name, "any"), bare.keys.spec(bare.alice.name, "forged")):
            with pytest.raises(EtcdError, match="permission denied"):
                mallory.get(key)
    finally:
        mallory.close()


def test_a_job_whose_user_maps_to_root_is_refused(bare: Bare) -> None:
    """etcd's root may write any spec; the host still runs nothing as root without root_trainers."""
    root = bare.etcd.admin_store()
    run = bare.shared / "as-root"
    try:
        root.put(bare.keys.spec("root", "as-root"), bare.job("as-root", run, HOST))
        refusal = wait_for(lambda: root.get(bare.keys.refused("as-root", HOST)), 30, "the host to refuse it")
    finally:
        root.close()
    assert "maps to root (uid 0): trainers never run as root unless root_trainers: true" in refusal.value
    assert not run.exists()
    assert "refusing job as-root of etcd user root" in bare.daemon_log.read_text()


def test_a_symlink_in_the_run_directory_reaches_nothing_root_owns(bare: Bare, tmp_path: Path) -> None:
    """Before, the host appended action lines to <run_dir>/actions.jsonl as root, following a symlink to any
    file root may write; now its user appends, and the kernel refuses."""
    victim = tmp_path / "root-owned"  # root's, 0644: writable by root only
    victim.write_text("untouched\n")
    run = bare.shared / "symlinked"
    run.mkdir()
    os.chown(run, bare.alice.uid, bare.alice.gid)
    (run / "actions.jsonl").symlink_to(victim)
    os.lchown(run / "actions.jsonl", bare.alice.uid, bare.alice.gid)
    alice = bare.store(bare.alice.name)
    try:
        alice.put(bare.keys.spec(bare.alice.name, "symlinked"), bare.job("symlinked", run))
    finally:
        alice.close()
    wait_for(lambda: (run / "probe-0.txt").is_file(), 60, "the trainer of the job with the symlink")
    wait_for(
        lambda: f"cannot append the action to {run / 'actions.jsonl'}" in bare.daemon_log.read_text(),
        30,
        "the host to fail appending as alice, and say so",
    )
    assert victim.read_text() == "untouched\n"


def test_a_host_that_could_write_specs_refuses_to_run(bare: Bare, tmp_path: Path) -> None:
    """A host's etcd user holding more than its role (here etcd's root) could decide what every host runs."""
    host = HostDaemon(
        bare.etcd.admin_store(),
        Keys("sec-unconfined"),
        HOST,
        [HostEntry(HOST)],
        tmp_path / "state",
        time.monotonic,
    )
    try:
        with pytest.raises(HostConfinementError, match="etcd lets this host write job specs"):
            host.cycle()
        assert host.running == {}
    finally:
        host.stop()


def test_a_users_trainer_is_judged_by_the_progress_it_writes(bare: Bare) -> None:
    """The host reads the heartbeats a trainer writes as its user (files its user owns, in its run directory):
    a trainer that beats to step 3 and stops is killed as hung at step 3, not as one that never started."""
    run = bare.shared / "beats"
    quick = {
        "trainer": {"command": ["/bin/sh", "-c", BEATS_THEN_HANGS]},
        "health": {"hang_timeout_s": 3, "startup_timeout_s": 30, "progress": "heartbeat"},
        "torchft": {"pg_timeout_s": 1, "timeout_s": 1, "quorum_timeout_s": 2},
        "lighthouse": {"host": "127.0.0.1", "port": free_port(), "join_timeout_ms": 100},
    }
    alice = bare.store(bare.alice.name)
    try:
        alice.put(bare.keys.spec(bare.alice.name, "beats"), bare.job("beats", run, **quick))
    finally:
        alice.close()
    line = wait_for(
        lambda: next((x for x in bare.daemon_log.read_text().splitlines() if "kill beats group 0" in x), None),
        60,
        "the host to kill the hung trainer",
    )
    assert "hung: no progress for" in line and "last step 3, from heartbeat" in line, line
    assert (run / "heartbeat" / "0.0.json").stat().st_uid == bare.alice.uid
