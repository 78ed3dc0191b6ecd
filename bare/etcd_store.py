"""Store: the one way lamplighter talks to etcd, through its gRPC gateway (JSON over HTTP, etcd3gw).

Why etcd3gw: it is maintained (OpenStack), typed, pure Python over `requests`
(no gRPC build on the nodes), and speaks TLS with client certificates. It talks
to one endpoint; Store keeps one client per member and tries them in turn, so
losing a member (or being cut off from it) costs one timeout, not the role.

Every call is bounded by `timeout_s` per member, and inside `until(deadline)`
by the deadline as well (a host daemon's fence deadline: a call blocked on a
cut link must not hold its trainers' kill back). A member that cannot be
reached is skipped for the rest of the call, and only when none answered does the call
raise EtcdError, naming what was asked and what each member said. A request
etcd refuses (a bad key, an unknown lease) is not retried elsewhere: it would
be refused there too. `requests_made` counts every HTTP request, for etcd's
load per host.

With etcd's auth on, every request is made as the Store's etcd user: its
password buys a token (once, and again when etcd says the token will not do:
expired, or issued before a change of roles), sent with each request. The
gateway cannot pass a client certificate's name on as the user; with auth on
it refuses a certificate that has one, so the certificate admits the client
and the password names it.
"""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests
from etcd3gw.client import Etcd3Client
from etcd3gw.exceptions import ConnectionFailedError, ConnectionTimeoutError, Etcd3Exception

from lamplighter.bare.prefix_watch import PrefixWatch


class EtcdError(RuntimeError):
    def __init__(self, what: str, problems: Sequence[str]) -> None:
        super().__init__(f"etcd: {what}: " + "; ".join(problems))
        self.what = what
        self.problems = list(problems)


@dataclass(frozen=True)
class Tls:
    """Client certificates: etcd with --client-cert-auth admits only clients its CA signed."""

    ca: str
    cert: str
    key: str


class CredentialsError(ValueError):
    """A password file that cannot be used; names the file and why."""


@dataclass(frozen=True)
class Credentials:
    """An etcd user and its password. With auth on, etcd decides what a request may do by its user, which
    the gateway learns only from a token the password buys: it refuses to take a user from a certificate
    (a certificate for it must carry no common name)."""

    user: str
    password: str = field(repr=False)

    @classmethod
    def from_file(cls, user: str, path: str) -> Credentials:
        """The password in `path`: a regular file of this process's user that no one else may read (as ssh
        keeps a private key), its first line."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise CredentialsError(f"etcd password file {path}: {e.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise CredentialsError(f"etcd password file {path}: not a regular file")
            if st.st_uid != os.geteuid():
                raise CredentialsError(f"etcd password file {path}: owned by uid {st.st_uid}, not by this user")
            if st.st_mode & 0o077:
                raise CredentialsError(
                    f"etcd password file {path}: others may read it (mode {stat.S_IMODE(st.st_mode):04o}): chmod 600"
                )
            text = f.read(4097).decode(errors="replace")
        password = text.split("\n", 1)[0].strip()
        if not password or len(text) > 4096:
            raise CredentialsError(f"etcd password file {path}: expected one line, the password")
        return cls(user, password)


# What etcd says when a request's token will not do (expired, issued before a change of roles, or none):
# authenticate again and retry once.
TOKEN_PROBLEMS = ("invalid auth token", "revision of auth store is old", "user name is empty")


@dataclass(frozen=True)
class Entry:
    key: str
    value: str
    mod_revision: int
    create_revision: int
    lease: int = 0


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _unb64(s: str) -> str:
    return base64.b64decode(s).decode()


def prefix_end(prefix: str) -> str:
    """etcd's range end for every key under `prefix` (the prefix with its last byte plus one)."""
    raw = prefix.encode()
    return (raw[:-1] + bytes([raw[-1] + 1])).decode()


# Conditions and operations of a transaction, as the gateway takes them.
def absent(key: str) -> dict[str, Any]:
    return {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def value_is(key: str, value: str) -> dict[str, Any]:
    return {"key": _b64(key), "target": "VALUE", "result": "EQUAL", "value": _b64(value)}


def created_at(key: str, revision: int) -> dict[str, Any]:
    """The key exists and is the one created at `revision` (not deleted and written again since)."""
    return {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": str(revision)}


def mod_revision_is(key: str, revision: int) -> dict[str, Any]:
    """`revision` 0: the key must not exist (its mod revision reads 0)."""
    return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def put(key: str, value: str, lease: int = 0) -> dict[str, Any]:
    req: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        req["lease"] = str(lease)
    return {"request_put": req}


def delete(key: str) -> dict[str, Any]:
    return {"request_delete_range": {"key": _b64(key)}}


def delete_prefix(prefix: str) -> dict[str, Any]:
    return {"request_delete_range": {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))}}


@dataclass
class Store:
    endpoints: Sequence[str]  # http(s)://host:port of each etcd member
    timeout_s: float = 2.0
    tls: Tls | None = None
    auth: Credentials | None = None  # etcd auth on: every request as this user
    requests_made: int = 0
    seen_revision: int = 0  # the newest store revision any answer carried (a lease renewal's too)
    _clients: list[Etcd3Client] = field(default_factory=list, repr=False)
    _first: int = 0  # the member that answered last: asked first next time
    _deadline: tuple[float, Callable[[], float]] | None = field(default=None, repr=False)
    _token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("etcd: no endpoints")
        for url in self.endpoints:
            u = urlsplit(url)
            if u.scheme not in ("http", "https") or not u.hostname or not u.port:
                raise ValueError(f"etcd endpoint {url!r}: expected http(s)://host:port")
            if u.scheme == "https" and self.tls is None:
                raise ValueError(f"etcd endpoint {url!r} is https: give the client certificate (tls)")
            session = self._session()
            self._clients.append(
                Etcd3Client(
                    host=u.hostname,
                    port=u.port,
                    protocol=u.scheme,
                    timeout=self.timeout_s,
                    api_path="/v3/",
                    session=session,
                )
            )

    def _session(self) -> requests.Session:
        """A session to the members: trust_env off, since REQUESTS_CA_BUNDLE would replace the cluster's CA
        (requests lets the environment override a session's verify) and an HTTP(S)_PROXY must never sit
        between a host and etcd; the client certificate when the cluster asks for one."""
        session = requests.Session()
        session.trust_env = False
        if self.tls is not None:
            session.verify = self.tls.ca
            session.cert = (self.tls.cert, self.tls.key)
        return session

    @contextmanager
    def until(self, deadline: float | None, clock: Callable[[], float]) -> Iterator[None]:
        """Every call inside ends by `deadline` (on `clock`): a member is given only the time left, and none
        is asked once it is gone. `None`: no deadline, only the timeout."""
        was, self._deadline = self._deadline, None if deadline is None else (deadline, clock)
        try:
            yield
        finally:
            self._deadline = was

    def call(self, what: str, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        if self.auth is None:
            return self._send(what, path, payload)
        if self._token is None:
            self._authenticate()
        try:
            return self._send(what, path, payload)
        except EtcdError as e:
            if not any(p in str(e) for p in TOKEN_PROBLEMS):
                raise
        self._authenticate()
        return self._send(what, path, payload)

    def _authenticate(self) -> None:
        assert self.auth is not None
        for c in self._clients:
            c.session.headers.pop("Authorization", None)
        self._token = None
        out = self._send(
            f"authenticate as etcd user {self.auth.user}",
            "/auth/authenticate",
            {"name": self.auth.user, "password": self.auth.password},
        )
        self._token = str(out["token"])
        for c in self._clients:
            c.session.headers["Authorization"] = self._token

    def _send(self, what: str, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        problems: list[str] = []
        n = len(self._clients)
        for i in range(n):
            k = (self._first + i) % n
            client = self._clients[k]
            client.timeout = self.timeout_s
            if self._deadline is not None:
                left = self._deadline[0] - self._deadline[1]()
                if left <= 0:
                    problems.append(f"{self.endpoints[k]}: not asked, the call's deadline had passed")
                    continue
                client.timeout = min(self.timeout_s, left)
            self.requests_made += 1
            try:
                out: dict[str, Any] = client.post(client.get_url(path), json=payload)
            except (ConnectionFailedError, ConnectionTimeoutError) as e:
                problems.append(f"{self.endpoints[k]}: {type(e).__name__}")
                continue
            except Etcd3Exception as e:
                raise EtcdError(what, [f"{self.endpoints[k]} refused it: {e.detail_text or e}"]) from None
            self._first = k
            header = out.get("header") or (out.get("result") or {}).get("header") or {}
            self.seen_revision = max(self.seen_revision, int(header.get("revision") or 0))
            return out
        raise EtcdError(what, problems)

    def close(self) -> None:
        for c in self._clients:
            c.session.close()

    def watch(self, prefix: str, after_revision: int) -> PrefixWatch:
        """A watch on every key under `prefix` changed after `after_revision`, on the member that answered
        last, over a session of its own (the stream's thread never shares one with the calls)."""
        client = self._clients[self._first]
        session = self._session()
        if "Authorization" in client.session.headers:
            session.headers["Authorization"] = client.session.headers["Authorization"]
        self.requests_made += 1
        create = {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix)), "start_revision": str(after_revision + 1)}
        return PrefixWatch(session, client.get_url("/watch"), create, self.timeout_s)

    # -- keys ------------------------------------------------------------------

    def get(self, key: str) -> Entry | None:
        kvs = self.call(f"read {key}", "/kv/range", {"key": _b64(key)}).get("kvs") or []
        return _entry(kvs[0]) if kvs else None

    def prefix(self, prefix: str) -> tuple[int, list[Entry]]:
        """Every key under `prefix`, and the store's revision they were read at."""
        out = self.call(f"read {prefix}*", "/kv/range", {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))})
        return int(out["header"]["revision"]), [_entry(kv) for kv in out.get("kvs") or []]

    def put(self, key: str, value: str, lease: int = 0) -> int:
        """The store's revision after the write."""
        return int(self.call(f"write {key}", "/kv/put", put(key, value, lease)["request_put"])["header"]["revision"])

    def txn(self, what: str, compare: list[dict[str, Any]], success: list[dict[str, Any]]) -> bool:
        """All of `success` if every condition of `compare` holds, else nothing: whether it did."""
        out = self.call(what, "/kv/txn", {"compare": compare, "success": success, "failure": []})
        return bool(out.get("succeeded", False))

    # -- leases ----------------------------------------------------------------

    def grant(self, ttl_s: int) -> int:
        return int(self.call(f"grant a {ttl_s} s lease", "/lease/grant", {"TTL": str(ttl_s), "ID": "0"})["ID"])

    def keepalive(self, lease: int) -> int:
        """The lease's TTL again after renewing it; 0 or less: it had expired (its keys are gone)."""
        out = self.call(f"keep lease {lease:x} alive", "/lease/keepalive", {"ID": str(lease)})
        return int((out.get("result") or {}).get("TTL", -1))

    def revoke(self, lease: int) -> None:
        try:
            self.call(f"revoke lease {lease:x}", "/kv/lease/revoke", {"ID": str(lease)})
        except EtcdError as e:
            if not any("not found" in p for p in e.problems):
                raise


def _entry(kv: dict[str, Any]) -> Entry:
    return Entry(
        key=_unb64(kv["key"]),
        value=_unb64(kv.get("value", "")),
        mod_revision=int(kv.get("mod_revision", 0)),
        create_revision=int(kv.get("create_revision", 0)),
        lease=int(kv.get("lease", 0)),
    )
