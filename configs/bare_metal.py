"""The bare-metal sections of the config schema: how to reach etcd, and the cluster's hosts and spares.

A job config names the cluster and its etcd (`bare_metal:` with `placement:
bare-metal`); a host's node config (`role: bare-metal`) also lists the hosts,
the spares and the lease timing, which every host of the cluster must share.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Host, job and cluster names become etcd key segments (bare/keys.py): no '/', nothing that reaches another key.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
# A local account name as useradd takes it (no leading '-': it goes into setpriv's and getent's argv).
ACCOUNT = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,31}\$?")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


def check_name(v: str, what: str) -> str:
    if not NAME.fullmatch(v):
        raise ValueError(f"{what} {v!r}: 1-128 letters, digits, '_', '.' or '-', starting with a letter or digit")
    return v


class EtcdConfig(_Strict):
    """etcd, the only control plane of a bare-metal cluster."""

    endpoints: list[str] = Field(
        min_length=1,
        description="Client URLs of the etcd members, http(s)://host:port. Run 3 members (one may fail) or 5 (two).",
    )
    ca_file: str | None = Field(None, description="CA that signed etcd's server certificate (https endpoints).")
    cert_file: str | None = Field(None, description="This client's certificate (etcd --client-cert-auth).")
    key_file: str | None = Field(None, description="This client's private key.")
    timeout_s: float = Field(
        2.0, gt=0, le=30, description="Each etcd request gives up after this (then the next member)."
    )
    user: str | None = Field(
        None,
        description="This client's etcd user (etcd auth on): a host's own, or a submitter's, which names whose "
        "account the job's trainers run as. Its role says what it may write (`lamplighter hosts roles`).",
    )
    password_file: str | None = Field(
        None,
        description="A file holding the etcd user's password, readable by its owner only (mode 0600). etcd's "
        "gateway, which lamplighter talks to, cannot pass a certificate's name on: etcd knows the user by this.",
    )
    insecure_lab: bool = Field(
        False,
        description="A test machine only: allows http:// endpoints (anyone who reaches etcd may write a job every "
        "host runs) and etcd without a user (any certificate holder may, as anyone).",
    )

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        return None if v is None else check_name(v, "etcd user")

    @field_validator("endpoints")
    @classmethod
    def _endpoints(cls, v: list[str]) -> list[str]:
        for url in v:
            u = urlsplit(url)
            if u.scheme not in ("http", "https") or not u.hostname or not u.port or u.path not in ("", "/"):
                raise ValueError(f"etcd endpoint {url!r}: expected http(s)://host:port")
        if len({urlsplit(u).scheme for u in v}) > 1:
            raise ValueError("etcd endpoints mix http and https: use one")
        return v

    @model_validator(mode="after")
    def _tls(self) -> EtcdConfig:
        tls = [self.ca_file, self.cert_file, self.key_file]
        https = urlsplit(self.endpoints[0]).scheme == "https"
        if https and not all(tls):
            raise ValueError("https etcd endpoints need ca_file, cert_file and key_file (client certificates)")
        if not https and any(tls):
            raise ValueError("ca_file/cert_file/key_file given but the etcd endpoints are http: use https")
        if (self.user is None) != (self.password_file is None):
            raise ValueError("etcd.user and etcd.password_file go together: etcd knows the user by its password")
        if not https and not self.insecure_lab:
            raise ValueError(
                "etcd endpoints are http://: anyone who reaches etcd could write a job that every host runs; use "
                "https with client certificates and an etcd user, or set etcd.insecure_lab: true on a test machine"
            )
        if self.user is None and not self.insecure_lab:
            raise ValueError(
                "no etcd.user: without etcd auth any certificate holder may write a job to run as anyone; give the "
                "user and its password_file (`lamplighter hosts roles` sets etcd up), or set etcd.insecure_lab: true "
                "on a test machine"
            )
        return self


class BareMetalJobConfig(_Strict):
    """Where a bare-metal job goes: the cluster's name in etcd, and etcd itself."""

    cluster: str = Field("default", description="The cluster's name in etcd (its hosts' node configs say the same).")
    etcd: EtcdConfig = Field(description="How to reach etcd.")

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, v: str) -> str:
        return check_name(v, "cluster name")


class BareMetalNodeConfig(BareMetalJobConfig):
    """A host of a bare-metal cluster: the same on every host."""

    hosts: list[str] = Field(min_length=1, description="The hosts groups are placed on, in order.")
    spares: list[str] = Field(default_factory=list, description="Hosts used only when a host fails (in order).")
    lease_ttl_s: int = Field(
        8,
        ge=2,
        le=60,
        description="A host whose lease is not renewed this long is dead: its groups move. Each host renews it "
        "every (lease_ttl_s - fence_margin_s) / 2 (3 s at the defaults: 0.33 etcd requests a second); a "
        "shorter lease sees a dead host sooner for more requests.",
    )
    trainer_users: dict[str, str] = Field(
        default_factory=dict,
        description="etcd user -> the local account its jobs' trainers run as, where the names differ (default: "
        "the account of the same name; a user with no account here has its jobs refused).",
    )
    root_trainers: bool = Field(
        False,
        description="Let a job whose etcd user maps to root (uid 0) run its trainers as root (still without "
        "capabilities). Off: such a job is refused.",
    )
    fence_margin_s: float = Field(
        2.0,
        gt=0,
        description="A host cut off from etcd kills its trainers this long before its lease can expire "
        "(more than the node's poll interval, which is how often it looks).",
    )

    @field_validator("hosts", "spares")
    @classmethod
    def _hosts(cls, v: list[str]) -> list[str]:
        return [check_name(h, "host") for h in v]

    @field_validator("trainer_users")
    @classmethod
    def _trainer_users(cls, v: dict[str, str]) -> dict[str, str]:
        for user, account in v.items():
            check_name(user, "etcd user")
            if not ACCOUNT.fullmatch(account):
                raise ValueError(f"trainer_users: {account!r} (for {user}) is not a local account name")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> BareMetalNodeConfig:
        every = self.hosts + self.spares
        dup = sorted({h for h in every if every.count(h) > 1})
        if dup:
            raise ValueError(f"host(s) listed twice across hosts and spares: {', '.join(dup)}")
        if self.fence_margin_s >= self.lease_ttl_s:
            raise ValueError(
                f"fence_margin_s ({self.fence_margin_s:g} s) must be below lease_ttl_s ({self.lease_ttl_s} s): "
                "a host would fence itself right after every renewal"
            )
        return self
