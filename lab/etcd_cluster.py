"""A real etcd cluster of 1-3 members on loopback, started and stopped by the project (Debian's etcd-server).

Each member gets its own data directory under the folder, and free client and
peer ports. `up` waits until every member answers /health; `stop` ends only
the processes it started, by PID; `kill(i)` SIGKILLs one member (a crashed
etcd host) and `restart(i)` brings it back on its data.

With `auth` (and TLS), etcd's auth is on as a site runs it: a root user (the
lab's own, `admin_store()`), and `add_user` makes a lamplighter user with its
role (bare/etcd_roles.py: a host, a submitter, an operator) and a random
password. Every client certificate then carries no common name (etcd's gateway
refuses one that does).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from lamplighter.bare import etcd_roles
from lamplighter.bare.etcd_store import Credentials, Store, Tls
from lamplighter.lab.etcd_tls import Pki, make_pki
from lamplighter.system.ports import free_port

ETCD = "etcd"


class EtcdClusterError(RuntimeError):
    pass


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log: Path
    scheme: str = "http"
    host: str = "127.0.0.1"  # where clients reach it (peers talk on loopback)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"


@dataclass
class EtcdCluster:
    folder: Path
    size: int = 1
    tls: bool = False  # clients need a certificate of the cluster's CA (etcd --client-cert-auth)
    host: str = "127.0.0.1"  # the client address (e.g. a host lab's gateway, reached from its namespaces)
    auth: bool = False  # etcd's auth on: every request as a user, each allowed only what its role grants
    members: list[Member] = field(default_factory=list)
    pki: Pki | None = None
    admin: Tls | None = None  # the lab's own client certificate (health checks, tests)
    root: Credentials | None = None  # with auth: etcd's root user, the lab's

    def __post_init__(self) -> None:
        if not 1 <= self.size <= 5:
            raise ValueError(f"etcd cluster size {self.size}: 1 to 5 members")
        if self.auth and not self.tls:
            raise ValueError("etcd auth in the lab runs with TLS: passwords never cross plain http")
        if shutil.which(ETCD) is None:
            raise EtcdClusterError("etcd is not installed: apt-get install etcd-server (make install does it)")

    @property
    def endpoints(self) -> list[str]:
        return [m.client_url for m in self.members]

    def up(self, timeout_s: float = 30.0) -> EtcdCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.tls:
            self.pki = make_pki(self.folder / "pki", ips=tuple(dict.fromkeys(("127.0.0.1", self.host))))
            self.admin = self.pki.client("lab-admin", common_name=not self.auth)
        scheme = "https" if self.tls else "http"
        self.members = [
            Member(
                f"m{i}",
                free_port(self.host),
                free_port(),
                self.folder / f"m{i}.etcd",
                self.folder / f"m{i}.log",
                scheme,
                self.host,
            )
            for i in range(self.size)
        ]
        for m in self.members:
            self._start(m, new=True)
        self.wait_healthy(timeout_s)
        if self.auth:
            self._enable_auth()
        return self

    def _enable_auth(self) -> None:
        root = Credentials("root", secrets.token_hex(16))
        plain = Store(self.endpoints, timeout_s=5.0, tls=self.admin)
        plain.call("add etcd's root user", "/auth/user/add", {"name": root.user, "password": root.password})
        plain.call("make it root", "/auth/user/grant", {"user": root.user, "role": "root"})
        plain.call("turn etcd's auth on", "/auth/enable", {})
        plain.close()
        self.root = root

    def client_tls(self, name: str) -> Tls:
        """A client certificate of this cluster's CA for `name` (without a common name when auth is on)."""
        assert self.pki is not None, "a TLS cluster"
        return self.pki.client(name, common_name=not self.auth)

    def admin_store(self, timeout_s: float = 5.0) -> Store:
        """The lab's own client: root when auth is on."""
        return Store(self.endpoints, timeout_s=timeout_s, tls=self.admin, auth=self.root)

    def add_user(self, name: str, role: etcd_roles.Role) -> Credentials:
        """An etcd user holding `role`, with a random password (auth on)."""
        assert self.root is not None, "add_user needs auth=True"
        creds = Credentials(name, secrets.token_hex(16))
        admin = self.admin_store()
        try:
            etcd_roles.apply(admin, role, creds.user, creds.password)
        finally:
            admin.close()
        return creds

    def _start(self, m: Member, new: bool) -> None:
        initial = ",".join(f"{x.name}={x.peer_url}" for x in self.members)
        argv = [
            ETCD,
            "--name", m.name,
            "--data-dir", str(m.data_dir),
            "--listen-client-urls", m.client_url,
            "--advertise-client-urls", m.client_url,
            "--listen-peer-urls", m.peer_url,
            "--initial-advertise-peer-urls", m.peer_url,
            "--initial-cluster", initial,
            "--initial-cluster-state", "new" if new else "existing",
            "--initial-cluster-token", f"lamplighter-lab-{os.getpid()}",
            "--log-outputs", "stderr",
        ]  # fmt: skip
        if self.pki is not None:
            argv += ["--cert-file", str(self.pki.server_cert), "--key-file", str(self.pki.server_key),
                     "--trusted-ca-file", str(self.pki.ca), "--client-cert-auth"]  # fmt: skip
        with m.log.open("ab") as log:
            m.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _ssl(self) -> ssl.SSLContext | None:
        if self.admin is None:
            return None
        ctx = ssl.create_default_context(cafile=self.admin.ca)
        ctx.load_cert_chain(self.admin.cert, self.admin.key)
        return ctx

    def metrics(self, m: Member) -> str:
        """The member's Prometheus metrics (its own count of requests served, for one)."""
        with urllib.request.urlopen(m.client_url + "/metrics", timeout=5.0, context=self._ssl()) as r:
            return str(r.read().decode())

    def requests_served(self) -> float:
        """Requests (unary and streams: a watch counts once however long it lasts) every member has served so
        far, from its own /metrics."""
        return sum(started_total(self.metrics(m)) for m in self.members if m.proc is not None)

    def leader(self) -> int:
        """The index of the member that leads the cluster now (from each member's own status)."""
        ids: dict[str, int] = {}
        lead = ""
        for i, m in enumerate(self.members):
            req = urllib.request.Request(m.client_url + "/v3/maintenance/status", data=b"{}", method="POST")
            with urllib.request.urlopen(req, timeout=5.0, context=self._ssl()) as r:
                st = json.loads(r.read())
            ids[str(st["header"]["member_id"])] = i
            lead = str(st["leader"])
        return ids[lead]

    def healthy(self, m: Member) -> bool:
        ctx = self._ssl()
        try:
            with urllib.request.urlopen(m.client_url + "/health", timeout=1.0, context=ctx) as r:
                return bool(json.loads(r.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            dead = [m for m in self.members if m.proc is not None and m.proc.poll() is not None]
            if dead:
                raise EtcdClusterError(f"etcd member {dead[0].name} exited; see {dead[0].log}")
            if all(self.healthy(m) for m in self.members if m.proc is not None):
                return
            if time.monotonic() > deadline:
                raise EtcdClusterError(f"etcd not healthy after {timeout_s:g} s; logs in {self.folder}")
            time.sleep(0.1)

    def kill(self, i: int) -> None:
        m = self.members[i]
        if m.proc is not None and m.proc.poll() is None:
            os.kill(m.proc.pid, signal.SIGKILL)
            m.proc.wait()
        m.proc = None

    def restart(self, i: int, timeout_s: float = 30.0) -> None:
        self.kill(i)
        self._start(self.members[i], new=False)
        self.wait_healthy(timeout_s)

    def stop(self) -> None:
        for m in self.members:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.terminate()
                try:
                    m.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    m.proc.kill()
                    m.proc.wait()
            m.proc = None

    def __enter__(self) -> EtcdCluster:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def started_total(metrics: str) -> float:
    """Pure: the sum of grpc_server_started_total over every method, from a member's /metrics text."""
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith("grpc_server_started_total{")
    )
