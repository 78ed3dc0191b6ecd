"""The key layout of one bare-metal cluster in etcd, in one place, and who may write each key (etcd_roles.py).

<root>/hosts/<host>               alive: written under the host daemon's lease, gone when it expires (that host)
<root>/out/<host>                 taken out (JSON: reason, when), until `lamplighter hosts resume HOST` (that
                                  host's GPU check, or an operator)
<root>/placer                     the placer's name, under its lease: who may move groups (any host: an election)
<root>/specs/<user>/<job>         the job, submitted by etcd user <user>, whose account its trainers run as
                                  (that user only: the key says who submitted it because no one else may write it)
<root>/jobs/<job>/groups/<g>      where group g runs (JSON: host, epoch, reason); written by the placer
<root>/jobs/<job>/failed/<g>      a host daemon saying group g cannot be restarted on its host (JSON: host, epoch)
<root>/jobs/<job>/refused/<host>  a host that will not run the job, and why (its user has no account there)

A job's name is the cluster's: the spec created first under that name is the job; the placer deletes
jobs/<job>/ once no spec has that name (cancelled).
"""

from __future__ import annotations

from dataclasses import dataclass

from lamplighter.configs.bare_metal import check_name


@dataclass(frozen=True)
class Keys:
    cluster: str

    def __post_init__(self) -> None:
        check_name(self.cluster, "cluster name")

    @property
    def root(self) -> str:
        return f"/lamplighter/{self.cluster}/"

    @property
    def hosts(self) -> str:
        return self.root + "hosts/"

    def host(self, name: str) -> str:
        return self.hosts + check_name(name, "host")

    @property
    def outs(self) -> str:
        return self.root + "out/"

    def out(self, name: str) -> str:
        return self.outs + check_name(name, "host")

    @property
    def placer(self) -> str:
        return self.root + "placer"

    @property
    def specs(self) -> str:
        return self.root + "specs/"

    def user_specs(self, user: str) -> str:
        return f"{self.specs}{check_name(user, 'etcd user')}/"

    def spec(self, user: str, job: str) -> str:
        return f"{self.user_specs(user)}{check_name(job, 'job')}"

    @property
    def jobs(self) -> str:
        return self.root + "jobs/"

    def job(self, job: str) -> str:
        """Everything the cluster keeps about a job besides its spec (placements, reports)."""
        return f"{self.jobs}{check_name(job, 'job')}/"

    def groups(self, job: str) -> str:
        return f"{self.job(job)}groups/"

    def group(self, job: str, g: int) -> str:
        return f"{self.groups(job)}{int(g)}"

    def failures(self, job: str) -> str:
        return f"{self.job(job)}failed/"

    def failed(self, job: str, g: int) -> str:
        return f"{self.failures(job)}{int(g)}"

    def refusals(self, job: str) -> str:
        return f"{self.job(job)}refused/"

    def refused(self, job: str, host: str) -> str:
        return f"{self.refusals(job)}{check_name(host, 'host')}"

    def parse_spec(self, key: str) -> tuple[str, str] | None:
        """(user, job) of a spec key; None for any other key, or a spec key with names no writer could use."""
        if not key.startswith(self.specs):
            return None
        parts = key[len(self.specs) :].split("/")
        if len(parts) != 2:
            return None
        try:
            return check_name(parts[0], "etcd user"), check_name(parts[1], "job")
        except ValueError:
            return None

    @staticmethod
    def last(key: str) -> str:
        return key.rsplit("/", 1)[-1]
